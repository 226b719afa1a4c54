package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/refgraph"
	"github.com/adstap/adstap/track"
)

// References records what one check of a stream's references started and
// ended: a "references" span, an event per finding ("dangling reference",
// "dangling reference resolved"), in the trace of the push whose answer
// made the change (its round's trace, as the push's span), else under the
// stream's connect span. Its status is an error when a finding started.
func (t *Tracing) References(stream uint64, ref *track.StreamRef, node string, p *track.Push, changes []refgraph.Change) {
	at := changes[0].At
	ctx := context.Background()
	opts := []trace.SpanStartOption{trace.WithTimestamp(at), trace.WithSpanKind(trace.SpanKindInternal)}
	var inConnect context.Context
	var link trace.SpanStartOption
	if s := t.stream(ref); s != nil {
		s.mu.Lock()
		inConnect, link = s.inConnect, s.link
		s.mu.Unlock()
	}
	switch {
	case p != nil && t.cfg.Grouping == GroupByVersion && p.Version != "":
		ctx = t.versions.context(t.cfg.Scope, p.PushID())
		opts = append(opts, newRoot)
		if link != nil {
			opts = append(opts, link)
		}
	case inConnect != nil:
		ctx = inConnect
	default:
		opts = append(opts, newRoot)
	}
	_, span := t.tracer.Start(ctx, "references", opts...)
	attrs := []attribute.KeyValue{attribute.Int64("xds.stream.id", int64(stream))}
	if node != "" {
		attrs = append(attrs, attribute.String("xds.node.id", node))
	}
	if p != nil {
		attrs = append(attrs, attribute.String("xds.type", p.Type), attribute.String("xds.version", p.Version), attribute.String("xds.nonce", p.Nonce))
	}
	span.SetAttributes(attrs...)
	firstStarted := ""
	for _, c := range changes {
		ev := []attribute.KeyValue{
			attribute.String("xds.reference.kind", string(c.Kind)),
			attribute.String("xds.reference.owner", c.OwnerType+" "+c.Owner),
			attribute.String("xds.reference.target", c.Target),
			attribute.Float64("xds.reference.share", c.Share()),
		}
		if c.Route != "" || c.VirtualHost != "" {
			ev = append(ev, attribute.String("xds.reference.route", c.RouteConfig+" / "+c.VirtualHost+" / "+c.Route))
		}
		if c.Config != "" {
			ev = append(ev, attribute.String("xds.reference.istio_config", c.Config))
		}
		name := "dangling reference"
		if c.Resolved {
			name = "dangling reference resolved"
			ev = append(ev, attribute.Float64("xds.reference.duration_ms", shared.Ms(c.Window)), attribute.Bool("xds.reference.make_before_break", c.MakeBeforeBreak),
				attribute.String("xds.reference.summary", c.ResolvedSummary(c.Present)))
		} else {
			if firstStarted == "" {
				firstStarted = c.Summary()
			}
			ev = append(ev, attribute.String("xds.reference.summary", c.Summary()+shared.FixHint(c.Finding)))
		}
		span.AddEvent(name, trace.WithTimestamp(c.At), trace.WithAttributes(ev...))
	}
	if firstStarted != "" {
		span.SetStatus(codes.Error, firstStarted)
	}
	span.End(trace.WithTimestamp(at))
}
