package export_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/track"
)

// The benchmarks feed a sink what the tracker emits for one stream of the W2
// workload (docs/performance.md): a 1 KB EDS push of one changed endpoint,
// then its ACK. The events are built and boxed before the timer starts, so
// B/op and allocs/op are the sink's own.

// discardExporter drops every span, as the bench harness's tap-full does.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

const (
	benchStream = 7
	benchNode   = "sidecar~10.0.0.7~reviews-v1-7f9c.default~default.svc.cluster.local"
	benchMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
)

// benchRounds is how many distinct pushes the events cycle through: each has
// its own version and nonce, as istiod's do.
const benchRounds = 64

func benchMeta(stream uint64) track.StreamMeta {
	return track.StreamMeta{ID: stream, ConnID: stream, Method: benchMethod, Protocol: codec.SotW, Peer: "10.0.0.7:41234", OpenedAt: t0}
}

// benchOpen is a stream's opening as the tracker hands it: with the
// StreamRef its later events carry.
func benchOpen(stream uint64) (track.StreamOpened, *track.StreamRef) {
	m := benchMeta(stream)
	ref := track.NewStreamRef(m)
	return track.StreamOpened{Stream: m, Ref: ref}, ref
}

func benchPush(stream uint64, ref *track.StreamRef, i int) track.Push {
	v := "2026-11-30T09:00:00Z/" + strconv.Itoa(100+i)
	at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
	return track.Push{
		StreamID: stream, Ref: ref,
		Node:    track.Node{ID: benchNode, Cluster: "reviews", UserAgent: "envoy/1.36.2"},
		TypeURL: codec.TypeEndpoint, Type: "eds",
		Version: v, Nonce: strconv.Itoa(1000 + i), Resources: 1, Bytes: 1028,
		Diff:   track.Diff{Changed: 1, ChangedNames: []string{"outbound|9080||reviews.default.svc.cluster.local"}},
		SentAt: at,
	}
}

// pushRounds is, per push of a stream, the events a sink gets: the push, the
// ACK request, the push's outcome.
func pushRounds(stream uint64, ref *track.StreamRef) [][]track.Event {
	rounds := make([][]track.Event, benchRounds)
	for i := range rounds {
		p := benchPush(stream, ref, i)
		ack := p.SentAt.Add(300 * time.Microsecond)
		rounds[i] = []track.Event{
			track.PushSent{Push: new(p)},
			track.RequestSeen{StreamID: stream, Ref: ref, Node: p.Node, TypeURL: p.TypeURL, Kind: track.KindACK, Nonce: p.Nonce, At: ack},
			track.PushEnded{Push: new(p), Result: track.ResultACK, At: ack, Latency: ack.Sub(p.SentAt)},
		}
	}
	return rounds
}

// runPushes feeds s the pushes of one stream, each with its own version: one
// op is one push and its ACK.
func runPushes(b *testing.B, s track.Sink) { runFleet(b, s, 1) }

// runFleet feeds s the pushes of streams streams, each version going to
// every stream in turn as a control plane's new version does: one op is one
// push of one stream and its ACK.
func runFleet(b *testing.B, s track.Sink, streams int) {
	b.Helper()
	rounds := make([][][]track.Event, streams)
	for k := range rounds {
		open, ref := benchOpen(benchStream + uint64(k))
		s.OnEvent(open)
		rounds[k] = pushRounds(benchStream+uint64(k), ref)
		// One push outside the timer: a stream's first push sets up what
		// every later one reuses.
		for _, e := range rounds[k][benchRounds-1] {
			s.OnEvent(e)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for _, e := range rounds[i%streams][i/streams%benchRounds] {
			s.OnEvent(e)
		}
	}
}

func newBenchTracing(b *testing.B, grouping string) *tracing.Tracing {
	b.Helper()
	tr, err := tracing.New(context.Background(), tracing.Config{
		Grouping: grouping, Scope: "mesh-bench", Exporter: discardExporter{},
		Getenv: func(string) string { return "" },
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := tr.Shutdown(context.Background()); err != nil {
			b.Error(err)
		}
	})
	return tr
}

// BenchmarkTracingPush is the tracing sink's cost of one push and its ACK:
// the push span, the link to the stream's connect span.
func BenchmarkTracingPush(b *testing.B) {
	for _, g := range []string{tracing.GroupByVersion, tracing.GroupByStream} {
		b.Run(g, func(b *testing.B) {
			runPushes(b, newBenchTracing(b, g))
		})
	}
	// W2's shape: every stream gets each version.
	b.Run("version-fleet-of-8", func(b *testing.B) {
		runFleet(b, newBenchTracing(b, tracing.GroupByVersion), 8)
	})
}

// BenchmarkLiveLogPush is the live log's cost of one push and its ACK: one
// line, in each --log-format.
func BenchmarkLiveLogPush(b *testing.B) {
	b.Run("pretty", func(b *testing.B) {
		runPushes(b, livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(io.Discard, slog.LevelInfo))}}))
	})
	b.Run("json", func(b *testing.B) {
		runPushes(b, livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}}))
	})
}

// BenchmarkMetricsPush is the metrics sink's cost of one push and its ACK,
// with the exemplar's trace id from a tracing sink as cmd/adstap wires it.
func BenchmarkMetricsPush(b *testing.B) {
	b.Run("exemplar-trace-id", func(b *testing.B) {
		tr := newBenchTracing(b, tracing.GroupByVersion)
		runPushes(b, metrics.New(metrics.Config{TraceID: tr.TraceIDFor}))
	})
	b.Run("node-label", func(b *testing.B) {
		runPushes(b, metrics.New(metrics.Config{NodeLabel: true}))
	})
}

// BenchmarkAllSinksPush is the three sinks of a W2 push as cmd/adstap wires
// them (internal/pipeline): live log in the text format, metrics with
// exemplars, tracing.
func BenchmarkAllSinksPush(b *testing.B) {
	b.Run("stream", func(b *testing.B) { runPushes(b, allSinks(b)) })
	b.Run("fleet-of-8", func(b *testing.B) { runFleet(b, allSinks(b), 8) })
}

// allSinks are the three sinks as cmd/adstap wires them.
func allSinks(b *testing.B) track.Sink {
	tr := newBenchTracing(b, tracing.GroupByVersion)
	sinks := []track.Sink{
		livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(io.Discard, slog.LevelInfo))}}),
		metrics.New(metrics.Config{TraceID: tr.TraceIDFor}),
		tr,
	}
	return track.SinkFunc(func(e track.Event) {
		for _, s := range sinks {
			s.OnEvent(e)
		}
	})
}

// BenchmarkAllSinksPushParallel is BenchmarkAllSinksPush with streams handled
// at once, each on a goroutine of its own as the observation workers handle
// them (-cpu sets how many): what a lock the streams share costs shows here.
func BenchmarkAllSinksPushParallel(b *testing.B) {
	s := allSinks(b)
	var next atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		id := benchStream + next.Add(1)
		open, ref := benchOpen(id)
		s.OnEvent(open)
		rounds := pushRounds(id, ref)
		for i := 0; pb.Next(); i++ {
			for _, e := range rounds[i%benchRounds] {
				s.OnEvent(e)
			}
		}
	})
}

// nopProcessor ends spans without keeping them: the SDK's own cost only.
type nopProcessor struct{}

func (nopProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (nopProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (nopProcessor) Shutdown(context.Context) error                  { return nil }
func (nopProcessor) ForceFlush(context.Context) error                { return nil }

// BenchmarkSDKSpan is the floor: what the OpenTelemetry SDK allocates to
// start and end one span with n attributes and one link, given as start
// options (as trace.WithAttributes passes them) or set once after the start.
func BenchmarkSDKSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(nopProcessor{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("bench")
	_, parent := tracer.Start(context.Background(), "parent")
	link := trace.Link{SpanContext: parent.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("xds.link", "stream")}}
	for _, n := range []int{0, 1, 8, 16, 24} {
		attrs := make([]attribute.KeyValue, n)
		for i := range attrs {
			attrs[i] = attribute.Int("k"+strconv.Itoa(i), i)
		}
		b.Run(fmt.Sprintf("attrs=%d/start-options", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, s := tracer.Start(context.Background(), "EDS push", trace.WithNewRoot(), trace.WithLinks(link), trace.WithAttributes(attrs...))
				s.End()
			}
		})
		b.Run(fmt.Sprintf("attrs=%d/set-after-start", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, s := tracer.Start(context.Background(), "EDS push", trace.WithNewRoot(), trace.WithLinks(link))
				s.SetAttributes(attrs...)
				s.End()
			}
		})
	}
}

// BenchmarkLogWriterWrite is one live-log line handed to the writer and
// written out: the buffers of lines written serve the next lines.
func BenchmarkLogWriterWrite(b *testing.B) {
	written := make(chan struct{}, 1)
	w := export.NewLogWriter(export.LogWriterConfig{Writer: writerFunc(func(p []byte) (int, error) {
		select {
		case written <- struct{}{}:
		default:
		}
		return len(p), nil
	})})
	defer w.Close(context.Background())
	line := []byte(`12:00:00.000 ACK   stream 7 EDS v2 (1 resource, 1.0 KB) in 412µs node=sidecar~10.0.0.7~reviews-v1.default~default.svc.cluster.local` + "\n")
	b.ReportAllocs()
	for b.Loop() {
		w.Write(line)
		<-written
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
