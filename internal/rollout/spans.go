package rollout

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// span is what rollout reads of a span.
type span struct {
	TraceID, SpanID string // hex
	Name            string
	Start, End      time.Time
	Attrs           map[string]string // span attributes; lists as their JSON
	Lists           map[string][]string
	Resource        map[string]string
	Events          []event
	Error           bool
	Message         string // the status's
}

// event is a span event.
type event struct {
	Name  string
	Attrs map[string]string
}

// spanReader gathers the spans of one answer, up to max of them; left
// counts those past it.
type spanReader struct {
	max   int
	spans []span
	left  int
}

func (j *Jaeger) reader() *spanReader { return &spanReader{max: j.maxSpans} }

// add keeps s, unless the reader is full; it reports whether to go on.
func (r *spanReader) add(s *tracepb.Span, res map[string]string) bool {
	if len(r.spans) >= r.max {
		r.left++
		return false
	}
	r.spans = append(r.spans, spanOf(s, res))
	return true
}

// withMatch keeps the spans of the traces that hold a span with every
// attribute of attrs, as a span's own or an event's (istio.object).
func withMatch(spans []span, attrs map[string]string) []span {
	match := map[string]bool{}
	for _, s := range spans {
		if !match[s.TraceID] && matches(s, attrs) {
			match[s.TraceID] = true
		}
	}
	out := spans[:0]
	for _, s := range spans {
		if match[s.TraceID] {
			out = append(out, s)
		}
	}
	return out
}

func matches(s span, attrs map[string]string) bool {
	for k, v := range attrs {
		if s.Attrs[k] == v {
			continue
		}
		found := false
		for _, e := range s.Events {
			if e.Attrs[k] == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func spanOf(s *tracepb.Span, res map[string]string) span {
	out := span{
		TraceID:  hex.EncodeToString(s.TraceId),
		SpanID:   hex.EncodeToString(s.SpanId),
		Name:     s.Name,
		Start:    time.Unix(0, int64(s.StartTimeUnixNano)),
		End:      time.Unix(0, int64(s.EndTimeUnixNano)),
		Attrs:    attrMap(s.Attributes),
		Lists:    listMap(s.Attributes),
		Resource: res,
	}
	if st := s.Status; st != nil {
		out.Error = st.Code == tracepb.Status_STATUS_CODE_ERROR
		out.Message = st.Message
	}
	for _, e := range s.Events {
		out.Events = append(out.Events, event{Name: e.Name, Attrs: attrMap(e.Attributes)})
	}
	return out
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = valueString(kv.Value)
	}
	return m
}

func listMap(kvs []*commonpb.KeyValue) map[string][]string {
	var m map[string][]string
	for _, kv := range kvs {
		if arr := kv.GetValue().GetArrayValue(); arr != nil {
			if m == nil {
				m = map[string][]string{}
			}
			for _, v := range arr.Values {
				m[kv.Key] = append(m[kv.Key], valueString(v))
			}
		}
	}
	return m
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, fmt.Sprintf("%q", valueString(e)))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return ""
}
