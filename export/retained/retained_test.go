package retained_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/track"
)

// TestConfigStoreKeepsWhatTheTrackerHandsOver: fed the tracker's events and
// nothing else, as the pipeline wires it, the store serves what each ACK
// accepted — a first push, then one that changed a cluster and dropped
// another, which the tracker keeps compact (the clusters it carried
// unchanged keep the bodies retained before) — and never a push awaiting
// its answer or NACKed. Each push is decoded once, by the tap: its envelope
// is broken as soon as the tracker has seen it, so a store that decoded the
// push's bytes again would have nothing to show. Nothing stays kept once the
// store, and tracing when it shares the bytes, are done with them.
func TestConfigStoreKeepsWhatTheTrackerHandsOver(t *testing.T) {
	for _, traced := range []bool{false, true} {
		t.Run(fmt.Sprintf("tracing=%v", traced), func(t *testing.T) {
			leakcheck.Check(t)
			store := retained.New(retained.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.DiscardHandler), QueueBytes: 0}, MaxBytes: 1 << 20})
			defer func() {
				if err := store.Close(context.Background()); err != nil {
					t.Error(err)
				}
			}()
			sinks := []track.Sink{store}
			var tr *tracing.Tracing
			if traced {
				var err error
				if tr, err = tracing.New(context.Background(), tracing.Config{Exporter: &eventtest.SpanRecorder{}, Getenv: func(string) string { return "" }}); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if tr != nil {
						tr.Shutdown(context.Background())
					}
				}()
				sinks = append(sinks, tr)
			}
			tk := track.New(track.Config{})
			takeAll(tk, sinks...)
			at := t0
			feed := func(evs []track.Event) {
				for _, e := range evs {
					for _, s := range sinks {
						s.OnEvent(e)
					}
				}
			}
			clusters := func(n int, changed string) []*anypb.Any {
				var out []*anypb.Any
				for i := range n {
					c := xdsconfig.Cluster(fmt.Sprintf("outbound|80||svc-%d.shop.svc.cluster.local", i), true)
					if c.Name == changed {
						c.ConnectTimeout = durationpb.New(7 * time.Second)
					}
					out = append(out, xdstest.MustAny(c))
				}
				return out
			}
			push := func(version string, resources []*anypb.Any) {
				at = at.Add(time.Second)
				raw := xdstest.PushFrame(codec.TypeCluster, version, "n"+version, resources)
				resp, data := decodedPush(t, raw)
				feed(tk.ResponseFrame(1, at, resp, data.Len(), data))
				raw[0] = 0x07 // no valid tag: the push's bytes no longer decode
			}
			answer := func(version, nack string) {
				at = at.Add(time.Millisecond)
				feed(tk.Request(1, at, cdsAnswer(version, nack), 10))
			}
			type cluster struct {
				Name           string
				ConnectTimeout string
			}
			page := func() (code int, version string, got []cluster) {
				rec := httptest.NewRecorder()
				store.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/config?stream=1&type=cds", nil))
				if rec.Code != http.StatusOK {
					return rec.Code, "", nil
				}
				var p retained.Page
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
					t.Fatalf("/debug/config: %v in %s", err, rec.Body.String())
				}
				if p.Incomplete {
					t.Errorf("/debug/config says it is incomplete")
				}
				for _, r := range p.Resources {
					var c cluster
					if err := json.Unmarshal(r, &c); err != nil {
						t.Fatalf("/debug/config resource: %v in %s", err, r)
					}
					got = append(got, c)
				}
				return rec.Code, p.Version, got
			}
			want := func(what, version string, n int, changed string) {
				t.Helper()
				code, gotVersion, got := page()
				if code != http.StatusOK || gotVersion != version || len(got) != n {
					t.Fatalf("%s: /debug/config %d, version %q, %d clusters; want 200, %q, %d", what, code, gotVersion, len(got), version, n)
				}
				for i, c := range got {
					wantTimeout := "5s"
					if c.Name == changed {
						wantTimeout = "7s"
					}
					if c.Name != fmt.Sprintf("outbound|80||svc-%d.shop.svc.cluster.local", i) || c.ConnectTimeout != wantTimeout {
						t.Errorf("%s: cluster %d is %+v, want svc-%d with connect timeout %s", what, i, c, i, wantTimeout)
					}
				}
			}

			feed(tk.OpenStream(track.StreamMeta{ID: 1, Method: ads, Protocol: codec.SotW, OpenedAt: at}))
			feed(tk.Request(1, at, &codec.Request{TypeURL: codec.TypeCluster, Node: &codec.NodeIdentity{ID: nodeA}}, 10))
			push("1", clusters(10, ""))
			if code, _, _ := page(); code != http.StatusNotFound {
				t.Errorf("before any ACK: /debug/config %d, want 404", code)
			}
			answer("1", "")
			want("the first push ACKed", "1", 10, "")

			changed := "outbound|80||svc-0.shop.svc.cluster.local"
			push("2", clusters(9, changed)) // svc-0 changed, svc-9 gone
			want("the second push awaiting its answer", "1", 10, "")
			answer("2", "")
			want("the second push ACKed", "2", 9, changed)
			if !traced {
				if kept := tk.Kept().Bytes; kept != 0 {
					t.Errorf("the store has applied every ACK, yet the tracker still counts %d bytes kept", kept)
				}
			}

			push("3", clusters(9, ""))
			answer("3", "cluster svc-0: bad")
			want("the third push NACKed", "2", 9, changed)
			push("4", clusters(8, ""))
			want("the fourth push awaiting its answer", "2", 9, changed)

			feed(tk.CloseStream(1, at.Add(time.Second), 0, ""))
			if code, _, _ := page(); code != http.StatusNotFound {
				t.Errorf("after the stream's end: /debug/config %d, want 404", code)
			}
			if tr != nil {
				// The spans' queue lets go of the bytes as it exports them.
				err := tr.Shutdown(context.Background())
				tr = nil
				if err != nil {
					t.Fatal(err)
				}
			}
			if kept := tk.Kept().Bytes; kept != 0 {
				t.Errorf("after the stream's end the tracker still counts %d bytes kept", kept)
			}
		})
	}
}

// takeAll has each output among sinks that takes what the tracker keeps
// of pushes take it, as the pipeline does before any stream.
func takeAll(tk *track.Tracker, sinks ...track.Sink) {
	for _, s := range sinks {
		if t, ok := s.(interface{ Take(*track.Tracker) }); ok {
			t.Take(tk)
		}
	}
}
