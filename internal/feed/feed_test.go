package feed_test

import (
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/feed"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)

// split cuts b into pieces of n bytes, as gRPC hands a large message over.
func split(b []byte, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return out
}

// TestTrackDecodesThenTracks: a request and a push, whole or in pieces, are
// decoded and tracked, and what they decoded into is handed back; a frame
// that does not decode is tracked as a DecodeError of its direction, its
// error handed back too.
func TestTrackDecodesThenTracks(t *testing.T) {
	leakcheck.Check(t)
	req := xdstest.RequestFrame(&core.Node{Id: "n"}, codec.TypeCluster, "", "", "")
	push := xdstest.ClusterPush(3, 0, "1", "a")
	for _, tt := range []struct {
		name     string
		response bool
		data     mem.BufferSlice
		want     string // the event the frame gives: what it decoded into, or the error
	}{
		{"a request", false, mem.BufferSlice{mem.SliceBuffer(req)}, "track.RequestSeen"},
		{"a request in pieces", false, split(req, 5), "track.RequestSeen"},
		{"a push", true, mem.BufferSlice{mem.SliceBuffer(push)}, "track.PushSent"},
		{"a push in pieces", true, split(push, 7), "track.PushSent"},
		{"a request that does not decode", false, mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0xff})}, "request"},
		{"a push that does not decode", true, mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x05, 0x01})}, "response"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := track.New(track.Config{})
			tr.OpenStream(track.StreamMeta{ID: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", Protocol: codec.SotW, OpenedAt: t0})
			if tt.response {
				// A push answers a request.
				feed.Track(tr, nil, feed.Frame{Stream: 1, At: t0, Data: mem.BufferSlice{mem.SliceBuffer(req)}, Size: len(req)})
			}
			var resp codec.Response
			evs, d := feed.Track(tr, &resp, feed.Frame{Stream: 1, At: t0.Add(time.Second), Response: tt.response, Data: tt.data, Size: tt.data.Len()})
			var got string
			for _, e := range evs {
				switch e := e.(type) {
				case track.RequestSeen:
					if d.Request == nil || d.Err != nil {
						t.Errorf("a request tracked, handed back %+v", d)
					}
					got = "track.RequestSeen"
				case track.PushSent:
					if d.Response != &resp || len(resp.Resources) != 3 || d.Err != nil {
						t.Errorf("a push tracked, handed back %+v with %d resources", d, len(resp.Resources))
					}
					got = "track.PushSent"
				case track.DecodeError:
					if d.Err == nil || e.Err != d.Err {
						t.Errorf("a DecodeError (%v) handed back error %v", e.Err, d.Err)
					}
					got = e.Direction.String()
				}
			}
			if got != tt.want {
				t.Errorf("Track gave %q, want %q (events %v)", got, tt.want, evs)
			}
			tr.CloseStream(1, t0.Add(2*time.Second), 0, "")
		})
	}
}

// With a buffer, the events are appended to what it holds, from its length,
// whatever the frame gives.
func TestTrackAppendsToTheBuffer(t *testing.T) {
	leakcheck.Check(t)
	req := xdstest.RequestFrame(&core.Node{Id: "n"}, codec.TypeCluster, "", "", "")
	push := xdstest.ClusterPush(3, 0, "1", "a")
	tr := track.New(track.Config{})
	tr.OpenStream(track.StreamMeta{ID: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", Protocol: codec.SotW, OpenedAt: t0})
	defer tr.CloseStream(1, t0.Add(time.Minute), 0, "")
	held := track.UpstreamConnected{UpstreamConnect: codec.UpstreamConnect{Upstream: "held"}}
	var resp codec.Response
	for i, f := range []feed.Frame{
		{Data: mem.BufferSlice{mem.SliceBuffer(req)}, Size: len(req)},
		{Response: true, Data: mem.BufferSlice{mem.SliceBuffer(push)}, Size: len(push)},
		{Response: true, Data: mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x05, 0x01})}, Size: 3},
	} {
		f.Stream, f.At = 1, t0.Add(time.Duration(i)*time.Second)
		buf := make([]track.Event, 1, 8)
		buf[0] = held
		f.Events = buf
		evs, _ := feed.Track(tr, &resp, f)
		if len(evs) < 2 || evs[0] != track.Event(held) {
			t.Fatalf("frame %d: events %v, want the buffer's first and the frame's after it", i, evs)
		}
		if &evs[0] != &buf[0] {
			t.Errorf("frame %d: the events are not in the buffer given", i)
		}
	}
}
