package jaegertest_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sent is what send exported: a push span with an ack child.
type sent struct {
	traceID, push, ack string
}

// send exports a parent/child pair of spans of service through exp and
// shuts the TracerProvider down, which flushes and closes the exporter.
func send(t *testing.T, exp sdktrace.SpanExporter, service string) sent {
	t.Helper()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", service),
			attribute.String("host.name", "jaegertest"),
		)),
	)
	tracer := tp.Tracer("github.com/adstap/adstap/internal/testutil/jaegertest")
	ctx, push := tracer.Start(context.Background(), "push CDS",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("xds.type", "CDS")))
	_, ack := tracer.Start(ctx, "ack",
		trace.WithAttributes(
			attribute.String("xds.type", "CDS"),
			attribute.String("xds.version", "v42"),
			attribute.Int64("xds.resources", 117),
			attribute.Bool("xds.nack", false),
		))
	ack.AddEvent("ACK received", trace.WithAttributes(attribute.Float64("latency_ms", 14.5)))
	time.Sleep(time.Millisecond)
	ack.End()
	push.End()
	s := sent{
		traceID: push.SpanContext().TraceID().String(),
		push:    push.SpanContext().SpanID().String(),
		ack:     ack.SpanContext().SpanID().String(),
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatalf("export: %v", err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("shut the TracerProvider down: %v", err)
	}
	return s
}

// check finds the spans that send sent in j, as the exporter's tests will.
func check(t *testing.T, j *jaegertest.Jaeger, service string, s sent) {
	t.Helper()
	traces := j.WaitTraces(t, service, map[string]string{"xds.version": "v42"}, func(tr []jaegertest.Trace) bool {
		return len(tr) == 1 && len(tr[0].Spans) == 2
	})
	tr := traces[0]
	if tr.TraceID != s.traceID {
		t.Errorf("trace ID %s, want %s", tr.TraceID, s.traceID)
	}
	if len(tr.Warnings) > 0 {
		t.Errorf("trace warnings: %q", tr.Warnings)
	}
	spans := map[string]jaegertest.Span{}
	for _, sp := range tr.Spans {
		spans[sp.OperationName] = sp
		if len(sp.Warnings) > 0 {
			t.Errorf("span %q warnings: %q", sp.OperationName, sp.Warnings)
		}
		if sp.TraceID != s.traceID {
			t.Errorf("span %q trace ID %s, want %s", sp.OperationName, sp.TraceID, s.traceID)
		}
		if p := tr.Processes[sp.ProcessID]; p.ServiceName != service {
			t.Errorf("span %q service %q, want %q", sp.OperationName, p.ServiceName, service)
		}
		if sp.StartTime <= 0 || sp.Duration <= 0 {
			t.Errorf("span %q start %d duration %d µs", sp.OperationName, sp.StartTime, sp.Duration)
		}
	}
	push, ack := spans["push CDS"], spans["ack"]
	if push.SpanID != s.push || ack.SpanID != s.ack {
		t.Fatalf("spans %v, want push %s and ack %s\n%v", spans, s.push, s.ack, tr)
	}
	if p := push.ParentSpanID(); p != "" {
		t.Errorf("push has parent %s, want none", p)
	}
	if p := ack.ParentSpanID(); p != s.push {
		t.Errorf("ack's parent %q, want the push %s\n%v", p, s.push, tr)
	}
	if want := (jaegertest.Reference{RefType: "CHILD_OF", TraceID: s.traceID, SpanID: s.push}); len(ack.References) != 1 || ack.References[0] != want {
		t.Errorf("ack's references %+v, want [%+v]", ack.References, want)
	}
	for key, want := range map[string]any{
		"xds.type":      "CDS",
		"xds.version":   "v42",
		"xds.resources": int64(117),
		"xds.nack":      false,
	} {
		if got, ok := ack.Tag(key); !ok || got != want {
			t.Errorf("ack tag %s = %#v (found %v), want %#v", key, got, ok, want)
		}
	}
	if got, _ := push.Tag("span.kind"); got != "server" {
		t.Errorf("push tag span.kind = %#v, want server", got)
	}
	if len(ack.Logs) != 1 || len(ack.Logs[0].Fields) != 2 || ack.Logs[0].Timestamp < ack.StartTime {
		t.Errorf("ack logs %+v, want the event", ack.Logs)
	} else {
		fields := map[string]any{}
		for _, f := range ack.Logs[0].Fields {
			fields[f.Key] = f.Value
		}
		if fields["event"] != "ACK received" || fields["latency_ms"] != 14.5 {
			t.Errorf("ack event fields %v", fields)
		}
	}

	// The same trace by ID, and nothing for tags no span has.
	if byID := j.Trace(t, s.traceID); byID.TraceID != s.traceID || len(byID.Spans) != 2 {
		t.Errorf("trace by ID:\n%v", byID)
	}
	if other := j.Traces(t, service, map[string]string{"xds.version": "v43"}); len(other) != 0 {
		t.Errorf("traces with xds.version=v43: %v", other)
	}
}

func TestOTLP(t *testing.T) {
	leakcheck.Check(t)
	j := jaegertest.Start(t)
	ctx := context.Background()

	t.Run("grpc", func(t *testing.T) {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(j.OTLPGRPC), otlptracegrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		check(t, j, "jaegertest-grpc", send(t, exp, "jaegertest-grpc"))
	})
	t.Run("http", func(t *testing.T) {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.OTLPHTTP), otlptracehttp.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		check(t, j, "jaegertest-http", send(t, exp, "jaegertest-http"))
	})
}

// Two Jaegers at once share no port and no spans, as two test packages'
// would.
func TestTwoAtOnce(t *testing.T) {
	leakcheck.Check(t)
	a, b := jaegertest.Start(t), jaegertest.Start(t)
	for _, addr := range []string{a.OTLPGRPC, a.OTLPHTTP, a.QueryHTTP} {
		for _, other := range []string{b.OTLPGRPC, b.OTLPHTTP, b.QueryHTTP} {
			if addr == other {
				t.Fatalf("both Jaegers on %s", addr)
			}
		}
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(b.OTLPHTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	check(t, b, "jaegertest-b", send(t, exp, "jaegertest-b"))
	if got := a.Traces(t, "jaegertest-b", nil); len(got) != 0 {
		t.Errorf("the other Jaeger has the spans: %v", got)
	}
}
