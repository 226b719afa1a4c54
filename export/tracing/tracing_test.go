package tracing_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func TestTracingIsOffUntilAnEndpointIsGiven(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name string
		flag string
		env  map[string]string
		want bool
	}{
		{"nothing configured", "", nil, false},
		{"the flag", "http://jaeger:4317", nil, true},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, true},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"SDK disabled", "http://jaeger:4317", map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
		{"traces exporter none", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tracing.Config{Endpoint: tc.flag, Getenv: func(k string) string { return tc.env[k] }}
			if got := tracing.Enabled(cfg); got != tc.want {
				t.Errorf("TracingEnabled = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVersionTraceIDsAgreeAcrossTapsAndDifferAcrossScopes(t *testing.T) {
	leakcheck.Check(t)
	const v = "2026-11-30T09:00:05Z/42"
	a, b := tracing.VersionTraceID("mesh-1", v), tracing.VersionTraceID("mesh-1", v)
	if a != b || !a.IsValid() {
		t.Errorf("the same scope and version gave %s and %s", a, b)
	}
	if tracing.VersionTraceID("mesh-2", v) == a || tracing.VersionTraceID("mesh-1", v+"0") == a {
		t.Error("another scope or version gave the same trace id")
	}
}

// pushSpans leaves out all but push spans (the connect spans end when the
// sink shuts down).
func pushSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasSuffix(s.Name(), " push") {
			out = append(out, s)
		}
	}
	return out
}

// nodeOf reads a span's node attributes.
func nodeOf(s sdktrace.ReadOnlySpan) map[string]string {
	got := map[string]string{}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case "xds.node.id", "xds.node.cluster", "user_agent.original":
			got[string(kv.Key)] = kv.Value.AsString()
		}
	}
	return got
}

// A push span carries the node its push came with, even when the stream's
// node changes between pushes and back, although a stream's attributes are
// made once.
func TestPushSpansFollowTheNodeOfTheirStream(t *testing.T) {
	leakcheck.Check(t)
	a := track.Node{ID: nodeA, Cluster: "reviews", UserAgent: "envoy/1.36.2"}
	b := track.Node{ID: nodeB, UserAgent: "envoy/1.37.0"}
	c := track.Node{ID: nodeA, Cluster: "ratings", UserAgent: "envoy/1.36.2"} // same id, other cluster
	nodes := []track.Node{a, a, b, {}, a, c, b}
	events := []track.Event{track.StreamOpened{Stream: track.StreamMeta{ID: 1, Method: ads, Protocol: codec.SotW, OpenedAt: t0}}}
	for i, n := range nodes {
		p := track.Push{StreamID: 1, Node: n, TypeURL: codec.TypeCluster, Type: "cds", Version: fmt.Sprint("v", i), SentAt: t0}
		events = append(events, track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: track.ResultACK, At: t0})
	}
	spans := pushSpans(eventtest.TraceSpans(t, tracing.Config{}, events))
	if len(spans) != len(nodes) {
		t.Fatalf("%d spans, want %d", len(spans), len(nodes))
	}
	for i, n := range nodes {
		want := map[string]string{}
		if n.ID != "" {
			want["xds.node.id"] = n.ID
			if n.Cluster != "" {
				want["xds.node.cluster"] = n.Cluster
			}
			want["user_agent.original"] = n.UserAgent
		}
		if diff := cmp.Diff(want, nodeOf(spans[i])); diff != "" {
			t.Errorf("push %d: node attributes (-want +got):\n%s", i, diff)
		}
	}
}

// Trace ids are remembered for a few recent versions: many versions in
// turn, and coming back to an old one, must still give each its own.
func TestTraceIDForManyVersions(t *testing.T) {
	leakcheck.Check(t)
	const scope = "mesh-x"
	tr, err := tracing.New(context.Background(), tracing.Config{Scope: scope, Exporter: &eventtest.SpanRecorder{}, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	for round := 0; round < 3; round++ {
		for i := range 20 {
			v := fmt.Sprint("v", i*7%20)
			if got, want := tr.TraceIDFor(&track.Push{Version: v, FullPush: true}), tracing.VersionTraceID(scope, v).String(); got != want {
				t.Fatalf("TraceIDFor(%s) = %s, want %s", v, got, want)
			}
		}
	}
	if got := tr.TraceIDFor(&track.Push{StreamID: 5}); got != "" {
		t.Errorf("TraceIDFor a push without version on an unknown stream = %q, want none", got)
	}
}

// Push spans of a version go to the version's trace however many versions
// came between, and the exemplar's trace id agrees with the span's.
func TestPushSpansOfInterleavedVersions(t *testing.T) {
	leakcheck.Check(t)
	const scope = "mesh-y"
	var events []track.Event
	for id := uint64(1); id <= 3; id++ {
		events = append(events, track.StreamOpened{Stream: track.StreamMeta{ID: id, Method: ads, Protocol: codec.SotW, OpenedAt: t0}})
	}
	var versions []string
	for i := range 30 {
		v := fmt.Sprint("2026-11-30/", i%11)
		p := track.Push{StreamID: uint64(1 + i%3), TypeURL: codec.TypeEndpoint, Type: "eds", Version: v, FullPush: true, SentAt: t0}
		events = append(events, track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: track.ResultACK, At: t0})
		versions = append(versions, v)
	}
	spans := pushSpans(eventtest.TraceSpans(t, tracing.Config{Scope: scope}, events))
	if len(spans) != len(versions) {
		t.Fatalf("%d spans, want %d", len(spans), len(versions))
	}
	for i, s := range spans {
		if got, want := s.SpanContext().TraceID(), tracing.VersionTraceID(scope, versions[i]); got != want {
			t.Errorf("push %d of %s in trace %s, want %s", i, versions[i], got, want)
		}
	}
}

// Streams call the sink from their own goroutines, and the tracker's clock
// from another: pushes of many streams, and of one stream from two
// goroutines, while exemplars ask for trace ids (run with -race).
func TestTracingFromManyGoroutines(t *testing.T) {
	leakcheck.Check(t)
	for _, g := range []string{tracing.GroupByVersion, tracing.GroupByStream} {
		t.Run(g, func(t *testing.T) {
			rec := &eventtest.SpanRecorder{}
			tr, err := tracing.New(context.Background(), tracing.Config{Grouping: g, Exporter: rec, Getenv: func(string) string { return "" }})
			if err != nil {
				t.Fatal(err)
			}
			const streams, pushes = 8, 50
			var wg sync.WaitGroup
			for id := uint64(1); id <= streams; id++ {
				m := track.StreamMeta{ID: id, Method: ads, Protocol: codec.SotW, OpenedAt: t0}
				ref := track.NewStreamRef(m)
				tr.OnEvent(track.StreamOpened{Stream: m, Ref: ref})
				for range 2 { // the stream's goroutine and the clock
					wg.Go(func() {
						for i := range pushes {
							n := track.Node{ID: fmt.Sprint("node-", i%3)}
							p := track.Push{StreamID: id, Ref: ref, Node: n, TypeURL: codec.TypeCluster, Type: "cds", Version: fmt.Sprint("v", i%12), SentAt: t0}
							tr.OnEvent(track.PushSent{Push: new(p)})
							tr.OnEvent(track.PushEnded{Push: new(p), Result: track.ResultACK, At: t0})
							if tr.TraceIDFor(new(p)) == "" {
								t.Error("no trace id for a push of a known stream")
							}
						}
					})
				}
			}
			wg.Wait()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			var pushSpans int
			for _, s := range rec.Spans() {
				if s.Name() != "CDS push" {
					continue
				}
				pushSpans++
				if got := nodeOf(s)["xds.node.id"]; !strings.HasPrefix(got, "node-") {
					t.Errorf("push span with node %q", got)
				}
			}
			if pushSpans != streams*2*pushes {
				t.Errorf("%d push spans, want %d", pushSpans, streams*2*pushes)
			}
		})
	}
}
