package tracing

import (
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// Push spans name the Istio objects of the resources the push changed:
// xds.istio_config holds their paths, and an event per object, "istio
// config", holds istio.object ("destination-rule/shop/reviews"), a value a
// trace search can match exactly (a list attribute matches only whole).
const (
	istioConfigAttr    = "xds.istio_config"
	istioTruncatedAttr = "xds.istio_config.truncated"
	istioObjectEvent   = "istio config"
	istioObjectAttr    = "istio.object"
)

// spanObjects pairs push spans with what their push kept
// (track.Changed) or its NACK rejected (track.Rejected) from the moment the
// tracker's goroutine ends them to the moment the span queue takes them,
// where they wait for export. The queue's goroutine reads the objects as it
// takes each span off its queue (run), never the tracker's goroutine. The
// spans wait in shards by their (random) id, so that streams ending spans
// at once seldom share a lock.
type spanObjects struct {
	shards  [64]spanShard
	expects atomic.Int32 // spans waiting, read without a lock
}

type spanShard struct {
	mu      sync.Mutex
	waiting map[trace.SpanID]kept // spans about to end, with what their push kept
}

// kept is what a push span carries to the span queue.
type kept struct {
	changed  *track.Changed
	rejected *track.Rejected // claimed (origin.Claim)
}

func (o *spanObjects) shard(id trace.SpanID) *spanShard {
	return &o.shards[id[len(id)-1]%byte(len(o.shards))]
}

// expect says that the span id, about to end, carries k.
func (o *spanObjects) expect(id trace.SpanID, k kept) {
	sh := o.shard(id)
	shared.Taking("spanObjects.shard")
	sh.mu.Lock()
	if sh.waiting == nil {
		sh.waiting = map[trace.SpanID]kept{}
	}
	sh.waiting[id] = k
	sh.mu.Unlock()
	o.expects.Add(1)
}

// take returns what span id carries, if anything, and forgets it.
func (o *spanObjects) take(id trace.SpanID) kept {
	if o.expects.Load() == 0 {
		return kept{} // every span but a push's with kept bytes: one atomic load
	}
	sh := o.shard(id)
	sh.mu.Lock()
	k, ok := sh.waiting[id]
	if ok {
		delete(sh.waiting, id)
	}
	sh.mu.Unlock()
	if ok {
		o.expects.Add(-1)
	}
	return k
}

// withObjects is span with the objects s names: its attributes and events.
func withObjects(span sdktrace.ReadOnlySpan, s origin.Stamped) sdktrace.ReadOnlySpan {
	if len(s.Objects) == 0 {
		return span
	}
	// Appended in place: the SDK never writes an ended span's attributes
	// again, and no one else reads past their end.
	attrs := append(span.Attributes(), objectAttrs(s)...)
	events := objectEvents(span.Events(), s, span.EndTime())
	return objectSpan{ReadOnlySpan: span, attrs: attrs, events: events}
}

// withRejection is a NACK's span with what it rejected, read: the Istio
// objects to fix, as istiod recorded them, and the sentence the live log
// shows; then what the push changed, as a push that was not rejected says
// it.
func withRejection(span sdktrace.ReadOnlySpan, x *origin.Rejection) sdktrace.ReadOnlySpan {
	if x == nil {
		return span
	}
	attrs := append(span.Attributes(), attribute.String("xds.error.source", x.Summary()))
	if paths := shared.ObjectPaths(x); len(paths) > 0 {
		attrs = append(attrs, attribute.StringSlice("xds.error.istio_config", paths))
	}
	events := span.Events()
	if st := x.Changed(); len(st.Objects) > 0 {
		attrs = append(attrs, objectAttrs(st)...)
		events = objectEvents(events, st, span.EndTime())
	}
	return objectSpan{ReadOnlySpan: span, attrs: attrs, events: events}
}

// objectAttrs are a push span's attributes for the objects s names.
func objectAttrs(s origin.Stamped) []attribute.KeyValue {
	paths := make([]string, len(s.Objects))
	for i, o := range s.Objects {
		paths[i] = o.Path
	}
	attrs := []attribute.KeyValue{attribute.StringSlice(istioConfigAttr, paths)}
	if s.Truncated {
		attrs = append(attrs, attribute.Bool(istioTruncatedAttr, true))
	}
	return attrs
}

// objectEvents are the span events for the objects s names, at time at.
func objectEvents(events []sdktrace.Event, s origin.Stamped, at time.Time) []sdktrace.Event {
	out := make([]sdktrace.Event, len(events), len(events)+len(s.Objects))
	copy(out, events)
	for _, o := range s.Objects {
		out = append(out, sdktrace.Event{Name: istioObjectEvent, Time: at, Attributes: []attribute.KeyValue{attribute.String(istioObjectAttr, o.Ref())}})
	}
	return out
}

// objectSpan is a span as the SDK ended it, with the objects added: the
// exporter reads a span through these methods.
type objectSpan struct {
	sdktrace.ReadOnlySpan
	attrs  []attribute.KeyValue
	events []sdktrace.Event
}

func (s objectSpan) Attributes() []attribute.KeyValue { return s.attrs }
func (s objectSpan) Events() []sdktrace.Event         { return s.events }
