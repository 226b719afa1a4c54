package tracing_test

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const (
	nodeA = "sidecar~10.0.0.1~reviews-v1-7f9c.default~default.svc.cluster.local"
	nodeB = "router~10.0.0.9~gateway-5d8b.istio-system~istio-system.svc.cluster.local"
	ads   = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
)

// spanRecorder keeps the spans the tracing sink exports.
type spanRecorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (r *spanRecorder) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, s...)
	return nil
}

func (r *spanRecorder) Shutdown(context.Context) error { return nil }

// traceSpans runs events through a Tracing and returns its spans, in the
// order they ended.
func traceSpans(t *testing.T, cfg tracing.Config, events []track.Event) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := &spanRecorder{}
	cfg.Exporter = rec
	cfg.Getenv = func(string) string { return "" }
	tr, err := tracing.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		tr.OnEvent(e)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.spans
}
