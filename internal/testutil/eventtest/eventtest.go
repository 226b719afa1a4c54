// Package eventtest helps the outputs' tests feed tracker events by hand and read the spans they end.
package eventtest

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/track"
)

// Tracked fills in what a tracker hands with its events and a hand-written
// list leaves out: each stream's StreamRef (made at its StreamOpened, or at
// its first event), the stream's first push, and the type of its latest
// push for a DecodeError.
func Tracked(events ...track.Event) []track.Event {
	refs := map[uint64]*track.StreamRef{}
	pushed := map[uint64]string{}
	out := make([]track.Event, len(events))
	for i, e := range events {
		v := reflect.New(reflect.TypeOf(e)).Elem()
		v.Set(reflect.ValueOf(e))
		// The event's Ref and stream id, at its top or in its Push.
		holder := v
		if p := v.FieldByName("Push"); p.IsValid() && !p.IsNil() {
			// A copy of its own: the list may share a push between events.
			c := reflect.New(p.Type().Elem())
			c.Elem().Set(p.Elem())
			p.Set(c)
			holder = c.Elem()
		}
		ref, id := holder.FieldByName("Ref"), holder.FieldByName("StreamID")
		if s := v.FieldByName("Stream"); s.IsValid() {
			id = s.FieldByName("ID")
		}
		if ref.IsValid() && id.IsValid() && id.Uint() != 0 {
			n := id.Uint()
			if o, ok := e.(track.StreamOpened); ok {
				refs[n] = track.NewStreamRef(o.Stream)
			} else if refs[n] == nil {
				refs[n] = track.NewStreamRef(track.StreamMeta{ID: n})
			}
			ref.Set(reflect.ValueOf(refs[n]))
			switch e := e.(type) {
			case track.PushSent:
				_, seen := pushed[n]
				holder.FieldByName("First").SetBool(!seen)
				pushed[n] = e.Push.TypeURL
			case track.DecodeError:
				v.FieldByName("TypeURL").SetString(pushed[n])
			}
		}
		out[i] = v.Interface().(track.Event)
	}
	return out
}

// SpanRecorder keeps the spans the tracing output exports.
type SpanRecorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (r *SpanRecorder) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, s...)
	return nil
}

func (r *SpanRecorder) Shutdown(context.Context) error { return nil }

// Spans returns the spans exported so far, in the order they ended.
func (r *SpanRecorder) Spans() []sdktrace.ReadOnlySpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// TraceSpans runs events through a Tracing made with cfg and returns its
// spans, in the order they ended.
func TraceSpans(t testing.TB, cfg tracing.Config, events []track.Event) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := &SpanRecorder{}
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
	return rec.Spans()
}
