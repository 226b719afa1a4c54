package tracing

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adstap/adstap/origin"
)

// spanQueue is a span processor with a bounded queue that never blocks:
// when the collector is slow, down, or accepts and never answers, spans are
// dropped and counted, and the tap's observation goes on at full speed.
type spanQueue struct {
	exp           sdktrace.SpanExporter
	queue         chan queuedSpan
	batchSize     int
	exportTimeout time.Duration
	log           *slog.Logger

	dropped atomic.Uint64
	// The dropped spans by why: the queue was full, the export failed.
	queueFull, exportFailed atomic.Uint64
	lastWarn                atomic.Int64 // unix nanoseconds of the last drop warning

	// objects pairs a push span with what its push kept, whose Istio
	// objects run reads with scanner (spanobjects.go).
	objects spanObjects
	scanner origin.Scanner

	flush   chan chan struct{}
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

var _ sdktrace.SpanProcessor = (*spanQueue)(nil)

func newSpanQueue(exp sdktrace.SpanExporter, size int, log *slog.Logger) *spanQueue {
	q := &spanQueue{
		exp: exp, queue: make(chan queuedSpan, size), batchSize: 512,
		exportTimeout: 5 * time.Second, log: log,
		flush: make(chan chan struct{}), done: make(chan struct{}), stopped: make(chan struct{}),
	}
	go q.run()
	return q
}

// queuedSpan is a span waiting for export, and what its push kept of the
// resources it changed, if anything.
type queuedSpan struct {
	span sdktrace.ReadOnlySpan
	kept
}

// withObjects is the span with the Istio objects of what its push changed,
// or what its NACK rejected, read on the queue's goroutine with sc, letting
// go of the bytes.
func (s queuedSpan) withObjects(sc *origin.Scanner) sdktrace.ReadOnlySpan {
	span := s.span
	if s.rejected != nil {
		span = withRejection(span, origin.Of(s.rejected))
	}
	if s.changed != nil {
		span = withObjects(span, sc.Changed(s.changed))
	}
	return span
}

func (q *spanQueue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a finished span, or drops it when the queue is full, with
// what its push kept (Tracing.pushEnded).
func (q *spanQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	k := q.objects.take(s.SpanContext().SpanID())
	if !s.SpanContext().IsSampled() {
		k.changed.Release()
		return
	}
	select {
	case q.queue <- queuedSpan{s, k}:
	default:
		k.changed.Release()
		q.queueFull.Add(1)
		q.drop(1, "the span queue is full: the collector is slow or unreachable")
	}
}

func (q *spanQueue) drop(n int, why string) {
	q.dropped.Add(uint64(n))
	now := time.Now().UnixNano()
	last := q.lastWarn.Load()
	if now-last >= int64(time.Minute) && q.lastWarn.CompareAndSwap(last, now) {
		q.log.Warn("tracing: spans dropped (logged at most once a minute; see adstap_spans_dropped_total)",
			"reason", why, "dropped_total", q.dropped.Load())
	}
}

// Dropped is the number of spans that never reached the collector.
func (q *spanQueue) Dropped() uint64 { return q.dropped.Load() }

func (q *spanQueue) run() {
	defer close(q.stopped)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	batch := make([]sdktrace.ReadOnlySpan, 0, q.batchSize)
	export := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.exportTimeout)
		if err := q.exp.ExportSpans(ctx, batch); err != nil {
			q.exportFailed.Add(uint64(len(batch)))
			q.drop(len(batch), "export failed: "+err.Error())
		}
		cancel()
		clear(batch)
		batch = batch[:0]
	}
	drain := func() {
		for {
			select {
			case s := <-q.queue:
				batch = append(batch, s.withObjects(&q.scanner))
				if len(batch) == q.batchSize {
					export()
				}
			default:
				export()
				return
			}
		}
	}
	for {
		select {
		case s := <-q.queue:
			batch = append(batch, s.withObjects(&q.scanner))
			if len(batch) == q.batchSize {
				export()
			}
		case <-t.C:
			export()
		case ack := <-q.flush:
			drain()
			close(ack)
		case <-q.done:
			drain()
			return
		}
	}
}

// ForceFlush exports what is queued.
func (q *spanQueue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case q.flush <- ack:
	case <-q.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued, within ctx, and stops the exporter.
func (q *spanQueue) Shutdown(ctx context.Context) error {
	q.once.Do(func() { close(q.done) })
	select {
	case <-q.stopped:
	case <-ctx.Done():
	}
	err := q.exp.Shutdown(ctx)
	// An export stuck on a silent collector ends within exportTimeout.
	<-q.stopped
	return err
}
