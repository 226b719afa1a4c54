package reliability_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	rel "github.com/adstap/adstap/test/reliability"
)

// Frames no xDS decoder accepts: each one's envelope fails to decode.
var (
	overflow     = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	truncatedAny = append(protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), 10), "abc"...)
	badRequests  = [][]byte{
		overflow,
		{0x00, 0x00}, // field number 0
		append(protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), xdstest.ClusterType), 0x2a, 0x0a, 'x'), // truncated nonce
		protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), truncatedAny),                                  // a node cut short
		append(protowire.AppendTag(nil, 9, protowire.StartGroupType), protowire.AppendTag(nil, 10, protowire.EndGroupType)...),
	}
	badResponses = [][]byte{
		overflow,
		protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), truncatedAny), // resources[0] cut short
		xdstest.PushFrame(xdstest.ClusterType, "v1", "nonce-1", nil)[:8],                      // truncated
		append(protowire.AppendTag(nil, 9, protowire.StartGroupType), protowire.AppendTag(nil, 10, protowire.EndGroupType)...),
	}
)

// TestMalformedFramesAreRelayedUnchangedAndCounted: on an ADS stream through
// a tap wired as adstap run wires it, the client and the control plane mix
// frames no decoder accepts with well-formed ones. Every frame must arrive
// byte for byte, in order; the stream must go on; and each malformed frame
// must be counted once in adstap_decode_errors_total and logged.
func TestMalformedFramesAreRelayedUnchangedAndCounted(t *testing.T) {
	leakcheck.Check(t)
	for _, b := range badRequests {
		if _, err := codec.DecodeRequest(b, false); err == nil {
			t.Fatalf("request %x decodes: the test needs frames that do not", b)
		}
	}
	for _, b := range badResponses {
		if err := new(codec.Response).Decode(b, false); err == nil {
			t.Fatalf("response %x decodes: the test needs frames that do not", b)
		}
	}
	good := xdstest.PushFrame(xdstest.ClusterType, "v1", "nonce-1", xdstest.ClusterAnys(3, 500))
	want := append([][]byte{good}, badResponses...)
	var gotAtUpstream [][32]byte
	up := xdstest.StartRawUpstream(t, func(_ any, s grpc.ServerStream) error {
		// Answer each request with the next response, good or not.
		for i := 0; ; i++ {
			b, err := xdstest.Recv(s)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			gotAtUpstream = append(gotAtUpstream, sha256.Sum256(b))
			if i < len(want) {
				if err := xdstest.Send(s, want[i]); err != nil {
					return err
				}
			}
		}
	})
	tp := rel.StartTap(t, rel.TapOptions{Upstream: up.Addr})
	cc := tp.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := rel.OpenADS(t, ctx, cc)
	requests := [][]byte{xdstest.RequestFrame(&core.Node{Id: "bad-input"}, xdstest.ClusterType, "", "", "")}
	requests = append(requests, badRequests...)
	requests = append(requests, xdstest.RequestFrame(nil, xdstest.ClusterType, "v1", "nonce-1", "")) // the ACK, last
	var sentDigests [][32]byte
	for i, b := range requests {
		sentDigests = append(sentDigests, sha256.Sum256(b))
		if err := xdstest.Send(s, b); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if i < len(want) {
			got, err := xdstest.Recv(s)
			if err != nil {
				t.Fatalf("response %d: %v", i, err)
			}
			if !bytes.Equal(got, want[i]) {
				t.Errorf("response %d arrived changed: %x, want %x", i, got, want[i])
			}
		}
	}
	s.CloseSend()
	if _, err := xdstest.Recv(s); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	if !xdstest.Until(10*time.Second, func() bool { return tp.Events.Counts().StreamsClosed == 1 }) {
		t.Fatal("the tracker never saw the stream close")
	}
	if len(gotAtUpstream) != len(sentDigests) {
		t.Fatalf("the control plane got %d requests, the client sent %d", len(gotAtUpstream), len(sentDigests))
	}
	for i := range sentDigests {
		if gotAtUpstream[i] != sentDigests[i] {
			t.Errorf("request %d arrived changed", i)
		}
	}

	bad := len(badRequests) + len(badResponses)
	if got := tp.Metric(t, "adstap_decode_errors_total", nil); got != float64(bad) {
		t.Errorf("adstap_decode_errors_total = %v, want %d (%d requests, %d responses)", got, bad, len(badRequests), len(badResponses))
	}
	ev := tp.Events.Counts()
	if ev.DecodeErrorsByDirection["request"] != len(badRequests) || ev.DecodeErrorsByDirection["response"] != len(badResponses) {
		t.Errorf("decode errors by direction %v, want %d requests and %d responses", ev.DecodeErrorsByDirection, len(badRequests), len(badResponses))
	}
	if n := tp.Log.Count("undecodable"); n != bad {
		t.Errorf("the live log has %d lines about undecodable frames, want %d:\n%s", n, bad, tp.Log.String())
	}
	// The good frames around the bad ones were tracked: the push and its ACK.
	if ev.PushesSent != 1 || ev.PushesEnded["ack"] != 1 {
		t.Errorf("pushes sent %d, ended %v; want the one good push, ACKed", ev.PushesSent, ev.PushesEnded)
	}
	rel.Figure(t, "bad-input", "%d malformed frames (%d requests, %d responses) relayed byte for byte; adstap_decode_errors_total %v",
		bad, len(badRequests), len(badResponses), tp.Metric(t, "adstap_decode_errors_total", nil))
}
