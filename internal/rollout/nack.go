package rollout

import (
	"context"
	"slices"
	"strings"

	"github.com/adstap/adstap/origin"
)

// NACKRef names one proxy's NACK for NACKs: the trace of its push round (a
// metric exemplar's trace id) and, among the proxies of that round, which:
// the span's id when known, else the proxy (its pod.namespace as the tap's
// resource attributes give it, or its node id or the start of it, as an
// exemplar shortens it) and the type.
type NACKRef struct {
	TraceID, SpanID string
	Pod, Node, Type string
}

// NACK is what a NACK's span says: the proxy's message, where the rejected
// resources came from in words (xds.error.source), and the Istio objects
// they record. Found is false when the trace holds no such NACK.
type NACK struct {
	Message string          `json:"message"`
	Source  string          `json:"source,omitempty"`
	Objects []origin.Object `json:"istio_config,omitempty"`
	TraceID string          `json:"trace_id"`
	SpanID  string          `json:"span_id,omitempty"`
	Found   bool            `json:"found"`
}

// NACKs reads the NACK each ref names, in refs' order: one query per
// distinct trace, that is per push round, whatever the number of proxies
// (every proxy's push of a round is in the round's trace).
func NACKs(ctx context.Context, j *Jaeger, refs []NACKRef) ([]NACK, error) {
	traces := map[string][]span{}
	out := make([]NACK, len(refs))
	for i, ref := range refs {
		spans, ok := traces[ref.TraceID]
		if !ok {
			var err error
			if spans, err = j.trace(ctx, ref.TraceID); err != nil {
				return nil, err
			}
			traces[ref.TraceID] = spans
		}
		out[i] = nackIn(spans, ref)
	}
	return out, nil
}

// nackIn finds ref's NACK among a trace's spans: the latest that matches.
func nackIn(spans []span, ref NACKRef) NACK {
	n := NACK{TraceID: ref.TraceID}
	var at span
	for _, s := range spans {
		switch {
		case s.Attrs["xds.result"] != "nack":
		case ref.SpanID != "" && s.SpanID != ref.SpanID:
		case ref.SpanID == "" && ref.Pod != "" && podOf(s) != ref.Pod:
		case ref.SpanID == "" && ref.Node != "" && !strings.HasPrefix(s.Attrs["xds.node.id"], ref.Node):
		case ref.SpanID == "" && ref.Type != "" && s.Attrs["xds.type"] != ref.Type:
		case n.Found && !s.End.After(at.End):
		default:
			at, n.Found = s, true
		}
	}
	if !n.Found {
		return n
	}
	n.SpanID = at.SpanID
	n.Message, n.Source, n.Objects = nackOf(at)
	return n
}

// nackOf is what a NACK's span says: the message, the source in words and
// the Istio objects of what was rejected.
func nackOf(s span) (message, source string, objects []origin.Object) {
	message = s.Attrs["xds.error.message"]
	if message == "" {
		message = s.Message
	}
	for _, path := range s.Lists["xds.error.istio_config"] {
		if o, ok := origin.ParsePath(path); ok && !slices.Contains(objects, o) {
			objects = append(objects, o)
		}
	}
	return message, s.Attrs["xds.error.source"], objects
}
