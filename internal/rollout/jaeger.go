package rollout

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/gogo/protobuf/types"
	"github.com/jaegertracing/jaeger/proto-gen/api_v3"
	otlpcommon "github.com/jaegertracing/jaeger/proto-gen/otel/common/v1"
	otlptrace "github.com/jaegertracing/jaeger/proto-gen/otel/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Jaeger reads spans from Jaeger's query service, through its api_v3
// QueryService over gRPC (port 16685 by default), spans as OTLP. The client
// is Jaeger's own, generated from its IDL: jaeger-idl publishes the api_v3
// protos without Go code, and Jaeger has kept its generated api_v3 package
// public (proto-gen/api_v3) only up to v1.42; its messages are wire-compatible
// with today's query service for what rollout asks (GetServices, FindTraces,
// GetTrace).
type Jaeger struct {
	Target string // as given
	conn   *grpc.ClientConn
	query  api_v3.QueryServiceClient
}

// Dial connects to the query service at target: host:port, or a URL
// (grpc:// or http:// in plaintext, https:// over TLS) whose host and port
// are the gRPC query API's. It does not wait for the connection.
func Dial(target string) (*Jaeger, error) {
	addr, creds, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return nil, fmt.Errorf("--jaeger %q: %w", target, err)
	}
	return &Jaeger{Target: target, conn: conn, query: api_v3.NewQueryServiceClient(conn)}, nil
}

func parseTarget(target string) (string, credentials.TransportCredentials, error) {
	if target == "" {
		return "", nil, errors.New("--jaeger is required: the address of Jaeger's gRPC query API, host:port (16685)")
	}
	creds := insecure.NewCredentials()
	addr := target
	if strings.Contains(target, "://") {
		u, err := url.Parse(target)
		if err != nil {
			return "", nil, fmt.Errorf("--jaeger %q: %w", target, err)
		}
		switch u.Scheme {
		case "grpc", "http":
		case "https":
			creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		default:
			return "", nil, fmt.Errorf("--jaeger %q: scheme %q: want host:port, grpc://, http:// or https://", target, u.Scheme)
		}
		addr = u.Host
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return "", nil, fmt.Errorf("--jaeger %q: want host:port of Jaeger's gRPC query API (16685)", target)
	}
	return addr, creds, nil
}

// Close closes the connection.
func (j *Jaeger) Close() error { return j.conn.Close() }

// services lists the services Jaeger holds spans of.
func (j *Jaeger) services(ctx context.Context) ([]string, error) {
	r, err := j.query.GetServices(ctx, &api_v3.GetServicesRequest{})
	if err != nil {
		return nil, j.wrap(err)
	}
	return r.Services, nil
}

// maxTraces is the most traces one search returns: push rounds, not
// proxies, since every proxy's push of a round is in the round's trace.
const maxTraces = 1000

// find returns the spans of the traces that hold a span of service with
// every attribute of attrs (exact values), started within the last since:
// whole traces, each with the spans of every tap. One query, whatever the
// number of proxies.
func (j *Jaeger) find(ctx context.Context, service string, attrs map[string]string, since time.Duration) ([]span, error) {
	now := time.Now()
	stream, err := j.query.FindTraces(ctx, &api_v3.FindTracesRequest{Query: &api_v3.TraceQueryParameters{
		ServiceName:  service,
		Attributes:   attrs,
		StartTimeMin: timestamp(now.Add(-since)),
		StartTimeMax: timestamp(now.Add(time.Minute)),
		NumTraces:    maxTraces,
	}})
	if err != nil {
		return nil, j.wrap(err)
	}
	return j.receive(stream.Recv)
}

// trace returns the spans of one trace (hex id); none when Jaeger has no
// such trace.
func (j *Jaeger) trace(ctx context.Context, traceID string) ([]span, error) {
	stream, err := j.query.GetTrace(ctx, &api_v3.GetTraceRequest{TraceId: traceID})
	if err != nil {
		return nil, j.wrap(err)
	}
	return j.receive(stream.Recv)
}

func (j *Jaeger) receive(recv func() (*api_v3.SpansResponseChunk, error)) ([]span, error) {
	var spans []span
	for {
		chunk, err := recv()
		if err == io.EOF {
			return spans, nil
		}
		if err != nil {
			// Jaeger ends a search or a GetTrace that found nothing with
			// NotFound.
			if status.Code(err) == codes.NotFound {
				return spans, nil
			}
			return nil, j.wrap(err)
		}
		for _, rs := range chunk.ResourceSpans {
			res := attrMap(rs.GetResource().GetAttributes())
			// Jaeger's api_v3 messages are OTLP's of 2022, whose
			// instrumentation_library_spans is field 2, where OTLP now has
			// scope_spans with the same fields.
			for _, ss := range rs.InstrumentationLibrarySpans {
				for _, s := range ss.Spans {
					spans = append(spans, spanOf(s, res))
				}
			}
		}
	}
}

// wrap says which Jaeger an error came from, in one line.
func (j *Jaeger) wrap(err error) error {
	if s, ok := status.FromError(err); ok {
		msg := s.Message()
		if s.Code() == codes.Unavailable {
			return fmt.Errorf("Jaeger at %s cannot be reached (is it the gRPC query API, port 16685?): %s", j.Target, msg)
		}
		return fmt.Errorf("Jaeger at %s: %s: %s", j.Target, s.Code(), msg)
	}
	return fmt.Errorf("Jaeger at %s: %w", j.Target, err)
}

func timestamp(t time.Time) *types.Timestamp {
	return &types.Timestamp{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())}
}

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

func spanOf(s *otlptrace.Span, res map[string]string) span {
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
		out.Error = st.Code == otlptrace.Status_STATUS_CODE_ERROR
		out.Message = st.Message
	}
	for _, e := range s.Events {
		out.Events = append(out.Events, event{Name: e.Name, Attrs: attrMap(e.Attributes)})
	}
	return out
}

func attrMap(kvs []*otlpcommon.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = valueString(kv.Value)
	}
	return m
}

func listMap(kvs []*otlpcommon.KeyValue) map[string][]string {
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

func valueString(v *otlpcommon.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *otlpcommon.AnyValue_StringValue:
		return x.StringValue
	case *otlpcommon.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *otlpcommon.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *otlpcommon.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *otlpcommon.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.Values {
			parts = append(parts, fmt.Sprintf("%q", valueString(e)))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return ""
}
