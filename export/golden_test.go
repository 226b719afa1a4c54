package export_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// The golden files pin every span and every log line the sinks write for a
// story that touches each of their branches, so that work on how they are
// built cannot change what they say. Regenerate with -update only when a
// change of output is meant.
var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

const (
	nodeA = "sidecar~10.0.0.1~reviews-v1-7f9c.default~default.svc.cluster.local"
	nodeB = "router~10.0.0.9~gateway-5d8b.istio-system~istio-system.svc.cluster.local"
	ads   = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	delta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
)

// story is what a tap might see: three streams (one bringing its upstream
// connection up, one reusing it and closing before its full sync, a Delta
// one), an opaque stream, pushes ending every way, a node that changes on a
// stream, pushes without a version or a node, an unknown stream, detectors,
// upstream connects, a decode error and an observation gap, full pushes
// with and without a node and a version, and a push after a full sync.
func story() []track.Event {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	a := track.Node{ID: nodeA, Cluster: "reviews", UserAgent: "envoy/1.36.2"}
	b := track.Node{ID: nodeB}
	push := func(stream uint64, n track.Node, typeURL, version string, ms int) track.Push {
		return track.Push{
			StreamID: stream, Node: n, TypeURL: typeURL, Type: codec.ShortType(typeURL),
			Version: version, Nonce: fmt.Sprintf("n%d", ms), Resources: 3, Bytes: 2048 + ms,
			Diff:   track.Diff{Added: 1, Changed: 1, Unchanged: 1, AddedNames: []string{"a1"}, ChangedNames: []string{"c1"}},
			SentAt: at(ms),
		}
	}
	connect := &codec.UpstreamConnect{ConnID: 1, Upstream: "istiod.istio-system:15010", Start: at(-5), DNS: time.Millisecond, TCP: 2 * time.Millisecond, TLS: 1500 * time.Microsecond}
	failed := codec.UpstreamConnect{ConnID: 4, Upstream: "istiod.istio-system:15012", Start: at(-3), DNS: time.Millisecond, TCP: time.Millisecond, TLS: 2 * time.Millisecond, FailedPhase: "tls", Err: errors.New("x509: certificate signed by unknown authority")}
	s1 := track.StreamMeta{ID: 1, ConnID: 1, Method: ads, Protocol: codec.SotW, Peer: "10.0.0.1:41000", OpenedAt: at(0), Connect: connect}
	s2 := track.StreamMeta{ID: 2, ConnID: 1, Method: ads, Protocol: codec.SotW, Peer: "10.0.0.1:41000", OpenedAt: at(1)}
	s3 := track.StreamMeta{ID: 3, ConnID: 2, Method: delta, Protocol: codec.Delta, Peer: "[::1]:42000", OpenedAt: at(2)}
	s5 := track.StreamMeta{ID: 5, ConnID: 4, Method: ads, Protocol: codec.SotW, Peer: "10.0.0.2:41002", OpenedAt: at(4), Connect: &failed}
	s4 := track.StreamMeta{ID: 4, ConnID: 3, Method: "/istio.v1.auth.IstioCertificateService/CreateCertificate", Protocol: codec.Opaque, Peer: "10.0.0.1:41001", OpenedAt: at(3)}

	cds := push(1, a, codec.TypeCluster, "2026-11-30T09:00:00Z/41", 10)
	cds.FullSync, cds.Initial = true, true
	cds.Diff = track.Diff{Added: 120, AddedNames: []string{"outbound|9080||ratings", "outbound|9080||reviews"}}
	cds.Bytes = 1258291
	eds := push(1, a, codec.TypeEndpoint, "2026-11-30T09:00:00Z/41", 20)
	eds.Diff = track.Diff{Added: 1, Removed: 2, Changed: 3, Unchanged: 4, AddedNames: []string{"x"}, RemovedNames: []string{"y", "z"}, ChangedNames: []string{"c1", "c2", "c3"}}
	eds2 := push(1, a, codec.TypeEndpoint, "2026-11-30T09:00:01Z/42", 40)
	eds3 := push(1, a, codec.TypeEndpoint, "2026-11-30T09:00:02Z/43", 50)
	lds := push(1, b, codec.TypeListener, "2026-11-30T09:00:02Z/43", 70) // the node changed
	lds.FullSync, lds.Redundant = true, true
	lds.Diff = track.Diff{Unchanged: 3}
	rds := push(1, track.Node{}, codec.TypeRoute, "", 80) // no node, no version
	rds.Bytes = 999
	other := push(1, b, "type.googleapis.com/my.custom.Thing", "v9", 90)
	cds2 := push(2, a, codec.TypeCluster, "2026-11-30T09:00:00Z/41", 15)
	cds2.Bytes = 3 << 20
	fast := push(5, a, codec.TypeEndpoint, "2026-11-30T09:00:00Z/41", 12)
	fast.Resources, fast.Bytes = 1, 1028
	d1 := push(3, a, codec.TypeEndpoint, "", 25)
	d2 := push(3, a, codec.TypeEndpoint, "7", 35)
	lost := push(99, a, codec.TypeCluster, "2026-11-30T09:00:00Z/41", 45) // a stream the sinks never saw open
	late := push(1, b, codec.TypeSecret, "", 1300)                        // after the full sync, in the connect span's trace

	ended := func(p track.Push, r track.PushResult, ms int) track.PushEnded {
		return track.PushEnded{Push: new(p), Result: r, At: at(ms), Latency: at(ms).Sub(p.SentAt)}
	}
	nack := ended(eds, track.ResultNACK, 23)
	nack.ErrorCode, nack.Error, nack.ErrorNames = 3, "endpoints x: bad \"weight\"", []string{"x"}
	nack2 := ended(eds, track.ResultNACK, 24) // identical: held back
	nack2.ErrorCode, nack2.Error, nack2.ErrorNames = 3, "endpoints x: bad \"weight\"", []string{"x"}
	nack3 := ended(eds, track.ResultNACK, 5030) // written again, with the count
	nack3.ErrorCode, nack3.Error = 3, "endpoints x: bad \"weight\""
	timeout := ended(eds3, track.ResultTimeout, 30050)
	timeout.Latency = 30 * time.Second

	return []track.Event{
		track.UpstreamConnected{UpstreamConnect: *connect},
		track.UpstreamConnected{UpstreamConnect: failed},
		track.StreamOpened{Stream: s1},
		track.StreamOpened{Stream: s2},
		track.StreamOpened{Stream: s3},
		track.StreamOpened{Stream: s4},
		track.StreamOpened{Stream: s5},
		track.RequestSeen{StreamID: 1, Node: a, TypeURL: codec.TypeCluster, Kind: track.KindInitial, At: at(5)},
		track.PushSent{Push: new(cds)},
		track.PushSent{Push: new(cds2)},
		track.PushSent{Push: new(fast)},
		track.PushEnded{Push: new(fast), Result: track.ResultACK, At: at(12).Add(310 * time.Microsecond), Latency: 310 * time.Microsecond},
		track.RequestSeen{StreamID: 1, Node: a, TypeURL: codec.TypeCluster, Kind: track.KindACK, Nonce: cds.Nonce, At: at(14)},
		ended(cds, track.ResultACK, 14),
		ended(cds2, track.ResultACK, 16),
		track.PushSent{Push: new(eds)},
		nack, nack2, nack3,
		track.PushSent{Push: new(d1)},
		ended(d1, track.ResultACK, 26),
		track.PushSent{Push: new(d2)},
		ended(d2, track.ResultNACK, 36),
		track.PushSent{Push: new(eds2)},
		ended(eds2, track.ResultSuperseded, 50),
		track.PushSent{Push: new(eds3)},
		track.RequestSeen{StreamID: 1, Node: a, TypeURL: codec.TypeEndpoint, Kind: track.KindStale, Nonce: eds2.Nonce, At: at(55)},
		track.PushSent{Push: new(lost)},
		ended(lost, track.ResultACK, 46),
		track.PushSent{Push: new(lds)},
		track.FullPush{StreamID: 1, Node: b, Version: lds.Version, Round: 3, TypeURL: lds.TypeURL, At: at(70), Count: 1},
		ended(lds, track.ResultACK, 70),
		track.PushSent{Push: new(rds)},
		track.FullPush{StreamID: 1, TypeURL: rds.TypeURL, Round: 4, At: at(80), Count: 2},
		ended(rds, track.ResultACK, 81),
		track.PushSent{Push: new(other)},
		ended(other, track.ResultACK, 2090),
		track.FullSyncComplete{StreamID: 1, Node: b, At: at(1100), Elapsed: 1100 * time.Millisecond, Types: []string{codec.TypeCluster, codec.TypeEndpoint, codec.TypeListener}},
		track.FullSyncComplete{StreamID: 1, Node: b, At: at(1200), Elapsed: 1200 * time.Millisecond, Types: []string{codec.TypeCluster}},
		track.PushSent{Push: new(late)},
		ended(late, track.ResultACK, 1302),
		track.DetectorStarted{Detector: track.DetectorNACKStorm, Key: "stream 1 eds", StreamID: 1, Node: nodeA, TypeURL: codec.TypeEndpoint, At: at(3000), Count: 5, Detail: "5 NACKs of eds on stream 1 within 30s"},
		track.DetectorStarted{Detector: track.DetectorReconnectHerd, Key: "tap", At: at(3100), Count: 50, Detail: "50 streams opened within 1s"},
		track.DetectorEnded{Detector: track.DetectorNACKStorm, Key: "stream 1 eds", StreamID: 1, Node: nodeA, TypeURL: codec.TypeEndpoint, At: at(9000), Duration: 6 * time.Second, Count: 9},
		track.DetectorEnded{Detector: track.DetectorReconnectHerd, Key: "tap", At: at(9100), Duration: 6 * time.Second, Count: 50},
		track.DecodeError{StreamID: 3, Direction: codec.DirectionResponse, Err: errors.New("proto: cannot parse invalid wire-format data"), At: at(9200)},
		track.ObservationGap{StreamID: 3, Skipped: 12, At: at(9300)},
		track.PushEnded{Push: new(eds3), Result: track.ResultClosed, At: at(31000), Latency: 31 * time.Second},
		timeout,
		track.LateAnswer{Push: new(eds3), Result: track.ResultACK, At: at(31000), Latency: 31 * time.Second},
		track.StreamClosed{Stream: s1, Node: b, At: at(40000), Code: 14, Message: "upstream unavailable"},
		track.StreamClosed{Stream: s2, Node: a, At: at(40001), Code: 1, Message: "context canceled"},
		track.StreamClosed{Stream: s3, Node: a, At: at(40002)},
		track.StreamClosed{Stream: s4, At: at(40003)},
		track.StreamClosed{Stream: s5, Node: a, At: at(40004), Code: 14, Message: "upstream connect failed"},
	}
}

// renderSpans writes spans as text: span and trace ids, random but for
// version-derived traces, are named by their order of appearance.
func renderSpans(scope string, events []track.Event, spans []sdktrace.ReadOnlySpan) string {
	versionTraces := map[trace.TraceID]string{}
	for _, e := range events {
		if p, ok := e.(track.PushSent); ok && p.Push.Version != "" {
			versionTraces[tracing.VersionTraceID(scope, p.Push.Version)] = "version " + p.Push.Version
		}
	}
	spanNames := map[trace.SpanID]string{}
	for i, s := range spans {
		spanNames[s.SpanContext().SpanID()] = fmt.Sprintf("#%d", i)
	}
	traceNames := map[trace.TraceID]string{}
	traceName := func(id trace.TraceID) string {
		if n, ok := versionTraces[id]; ok {
			return n
		}
		if _, ok := traceNames[id]; !ok {
			traceNames[id] = fmt.Sprintf("T%d", len(traceNames)+1)
		}
		return traceNames[id]
	}
	spanName := func(sc trace.SpanContext) string {
		if !sc.IsValid() {
			return "-"
		}
		if n, ok := spanNames[sc.SpanID()]; ok {
			return n
		}
		return "unknown span"
	}
	attrs := func(kvs []attribute.KeyValue) string {
		var parts []string
		for _, kv := range kvs {
			parts = append(parts, fmt.Sprintf("%s=%s:%s", kv.Key, kv.Value.Type(), kv.Value.String()))
		}
		return strings.Join(parts, " ")
	}
	var b strings.Builder
	for i, s := range spans {
		fmt.Fprintf(&b, "#%d %q kind=%s trace=%q parent=%s sampled=%v children=%d\n", i, s.Name(), s.SpanKind(), traceName(s.SpanContext().TraceID()),
			spanName(s.Parent()), s.SpanContext().IsSampled(), s.ChildSpanCount())
		fmt.Fprintf(&b, "  time %s .. %s\n", s.StartTime().Sub(t0), s.EndTime().Sub(t0))
		fmt.Fprintf(&b, "  status %s %q\n", s.Status().Code, s.Status().Description)
		fmt.Fprintf(&b, "  attrs %s (dropped %d)\n", attrs(s.Attributes()), s.DroppedAttributes())
		for _, l := range s.Links() {
			fmt.Fprintf(&b, "  link %s trace=%q attrs %s (dropped %d)\n", spanName(l.SpanContext), traceName(l.SpanContext.TraceID()), attrs(l.Attributes), l.DroppedAttributeCount)
		}
		for _, e := range s.Events() {
			fmt.Fprintf(&b, "  event %q %s\n", e.Name, attrs(e.Attributes))
		}
	}
	return b.String()
}

func TestTracingGolden(t *testing.T) {
	leakcheck.Check(t)
	events := eventtest.Tracked(story()...)
	for _, g := range []string{tracing.GroupByVersion, tracing.GroupByStream} {
		t.Run(g, func(t *testing.T) {
			cfg := tracing.Config{Grouping: g, Scope: "mesh-golden"}
			golden(t, "spans-"+g+".golden", renderSpans(cfg.Scope, events, eventtest.TraceSpans(t, cfg, events)))
		})
	}
}

func TestLiveLogGolden(t *testing.T) {
	leakcheck.Check(t)
	events := eventtest.Tracked(story()...)
	t.Run("pretty", func(t *testing.T) {
		golden(t, "livelog-pretty.golden", strings.Join(lines(events...), "\n")+"\n")
	})
	t.Run("json", func(t *testing.T) {
		var buf bytes.Buffer
		noTime := func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
		l := livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: noTime}))}})
		for _, e := range events {
			l.OnEvent(e)
		}
		golden(t, "livelog-json.golden", buf.String())
	})
	t.Run("text with attributes and groups", func(t *testing.T) {
		// A logger carrying its own attributes and group, as a caller may
		// hand one over.
		var buf bytes.Buffer
		l := livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(&buf, slog.LevelInfo)).With("tap", "t1").WithGroup("g")}})
		for _, e := range eventtest.Tracked(story()...) {
			l.OnEvent(e)
		}
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			out = append(out, line[len("15:04:05.000 "):])
		}
		golden(t, "livelog-pretty-group.golden", strings.Join(out, "\n")+"\n")
	})
}
