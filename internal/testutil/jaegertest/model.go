package jaegertest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Trace is a trace in the JSON of Jaeger's UI API (/api/traces).
type Trace struct {
	TraceID   string             `json:"traceID"` // hex, as trace.TraceID.String()
	Spans     []Span             `json:"spans"`
	Processes map[string]Process `json:"processes"` // by Span.ProcessID
	Warnings  []string           `json:"warnings"`
}

// Span is a span of a Trace. OTLP's parent span ID is a CHILD_OF reference,
// its links FOLLOWS_FROM ones; its events are Logs; its attributes, kind,
// status and scope are Tags (span.kind, otel.status_code, otel.scope.name...);
// its resource is the Process.
type Span struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"` // hex, as trace.SpanID.String()
	OperationName string      `json:"operationName"`
	References    []Reference `json:"references"`
	StartTime     int64       `json:"startTime"` // µs since the Unix epoch
	Duration      int64       `json:"duration"`  // µs
	Tags          []KeyValue  `json:"tags"`
	Logs          []Log       `json:"logs"`
	ProcessID     string      `json:"processID"`
	Warnings      []string    `json:"warnings"`
}

// Reference is a span's reference to another: RefType is "CHILD_OF" or
// "FOLLOWS_FROM".
type Reference struct {
	RefType string `json:"refType"`
	TraceID string `json:"traceID"`
	SpanID  string `json:"spanID"`
}

// KeyValue is a tag, a log field or a process tag. Value holds the Go type of
// Type: string for "string", bool for "bool", int64 for "int64", float64 for
// "float64" and []byte for "binary". OTLP attributes that Jaeger has no type
// for (slices, maps) arrive as "string", in JSON.
type KeyValue struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

// Log is a span event: its name is the field "event".
type Log struct {
	Timestamp int64      `json:"timestamp"` // µs since the Unix epoch
	Fields    []KeyValue `json:"fields"`
}

// Process is the resource of spans: ServiceName is service.name, the other
// resource attributes are Tags.
type Process struct {
	ServiceName string     `json:"serviceName"`
	Tags        []KeyValue `json:"tags"`
}

// Tag returns the value of the span's first tag with that key.
func (s Span) Tag(key string) (any, bool) {
	for _, kv := range s.Tags {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// ParentSpanID returns the span ID of the span's first CHILD_OF reference,
// or "" for a root span.
func (s Span) ParentSpanID() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// UnmarshalJSON decodes a Jaeger UI key-value, giving Value the Go type of
// its Type (Jaeger writes int64 values beyond ±2^53 as decimal strings and
// binary ones as base64).
func (kv *KeyValue) UnmarshalJSON(b []byte) error {
	var raw struct {
		Key   string          `json:"key"`
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	kv.Key, kv.Type = raw.Key, raw.Type
	var err error
	switch raw.Type {
	case "int64":
		var n json.Number
		if err = json.Unmarshal(raw.Value, &n); err == nil {
			kv.Value, err = strconv.ParseInt(n.String(), 10, 64)
		}
	case "float64":
		var f float64
		err = json.Unmarshal(raw.Value, &f)
		kv.Value = f
	case "bool":
		var v bool
		err = json.Unmarshal(raw.Value, &v)
		kv.Value = v
	case "binary":
		var v []byte
		err = json.Unmarshal(raw.Value, &v)
		kv.Value = v
	case "string":
		var v string
		err = json.Unmarshal(raw.Value, &v)
		kv.Value = v
	default:
		d := json.NewDecoder(bytes.NewReader(raw.Value))
		d.UseNumber()
		err = d.Decode(&kv.Value)
	}
	if err != nil {
		return fmt.Errorf("tag %q of type %q: %w", raw.Key, raw.Type, err)
	}
	return nil
}

// String shows a trace compactly, one span a line, for failure messages.
func (tr Trace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s", tr.TraceID)
	if len(tr.Warnings) > 0 {
		fmt.Fprintf(&b, " warnings=%q", tr.Warnings)
	}
	for _, s := range tr.Spans {
		fmt.Fprintf(&b, "\n  span %s %q service=%q", s.SpanID, s.OperationName, tr.Processes[s.ProcessID].ServiceName)
		if p := s.ParentSpanID(); p != "" {
			fmt.Fprintf(&b, " parent=%s", p)
		}
		for _, kv := range s.Tags {
			fmt.Fprintf(&b, " %s=%v", kv.Key, kv.Value)
		}
		if len(s.Warnings) > 0 {
			fmt.Fprintf(&b, " warnings=%q", s.Warnings)
		}
	}
	return b.String()
}

func summary(traces []Trace) string {
	if len(traces) == 0 {
		return "(none)"
	}
	s := make([]string, len(traces))
	for i, tr := range traces {
		s[i] = tr.String()
	}
	return strings.Join(s, "\n")
}
