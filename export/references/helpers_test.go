package references_test

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const (
	node = "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local"
	ads  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
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
