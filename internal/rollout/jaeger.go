package rollout

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Jaeger reads spans from Jaeger's query service through its api_v3
// QueryService, spans as OTLP, over either of the two forms Jaeger serves
// it in: gRPC (port 16685) or HTTP with JSON answers (port 16686, the
// address people browse: /api/v3/services, /api/v3/traces). Both read into
// the same OTLP messages (go.opentelemetry.io/proto/otlp), so the output is
// the same whichever form is given.
type Jaeger struct {
	Target string // as given
	// gRPC: the connection; HTTP: the client and the base URL.
	conn *grpc.ClientConn
	http *http.Client
	base string
	// maxSpans bounds what one read keeps: a trace of the size that
	// folding now prevents (tens of thousands of spans) is read up to it.
	maxSpans int
	// truncated says how many spans the last reads left out past maxSpans.
	truncated int
}

// DefaultMaxSpans is the most spans a rollout reads in one answer.
const DefaultMaxSpans = 10_000

// Ports of Jaeger's query service.
const (
	grpcQueryPort = "16685"
	httpQueryPort = "16686"
)

// Dial prepares to read the query service at target, without connecting:
// host:port (gRPC, plaintext; port 16686 is taken as HTTP), grpc://
// (plaintext) or grpcs:// (TLS) for gRPC, http:// or https:// for HTTP,
// with a path prefix if Jaeger is served under one (an http:// or https://
// URL on port 16685 is taken as gRPC, as earlier versions read it).
func Dial(target string) (*Jaeger, error) {
	t, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{Target: target, maxSpans: DefaultMaxSpans}
	if t.http {
		j.base = t.base
		j.http = &http.Client{Transport: &http.Transport{
			Proxy:           http.ProxyFromEnvironment,
			TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
			// No idle connection outlives rollout's reads.
			DisableKeepAlives: true,
		}}
		return j, nil
	}
	conn, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(t.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		return nil, fmt.Errorf("--jaeger %q: %w", target, err)
	}
	j.conn = conn
	return j, nil
}

// maxMessage is the largest gRPC answer read: one trace of old (unfolded)
// spans comes as one message, 133 MB for a 20 s NACK loop.
const maxMessage = 256 << 20

type target struct {
	http  bool
	base  string // HTTP: scheme://host:port/prefix, no trailing slash
	addr  string // gRPC: host:port
	creds credentials.TransportCredentials
}

func parseTarget(s string) (target, error) {
	const want = "want host:port of Jaeger's gRPC query API (16685), or its HTTP URL, http://host:16686"
	if s == "" {
		return target{}, errors.New("--jaeger is required: Jaeger's query API, host:16685 (gRPC) or http://host:16686 (HTTP)")
	}
	t := target{addr: s, creds: insecure.NewCredentials()}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return target{}, fmt.Errorf("--jaeger %q: %w", s, err)
		}
		if u.Port() == "" {
			return target{}, fmt.Errorf("--jaeger %q: no port: %s", s, want)
		}
		switch u.Scheme {
		case "grpc":
		case "grpcs":
			t.creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		case "http", "https":
			if u.Port() == grpcQueryPort {
				if u.Scheme == "https" {
					t.creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
				}
				break
			}
			t.http = true
			t.base = u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
			return t, nil
		default:
			return target{}, fmt.Errorf("--jaeger %q: scheme %q: %s", s, u.Scheme, want)
		}
		t.addr = u.Host
	}
	_, port, err := net.SplitHostPort(t.addr)
	if err != nil || port == "" {
		return target{}, fmt.Errorf("--jaeger %q: %s", s, want)
	}
	if port == httpQueryPort {
		t.http, t.base = true, "http://"+t.addr
	}
	return t, nil
}

// Close lets go of the connection.
func (j *Jaeger) Close() error {
	if j.conn != nil {
		return j.conn.Close()
	}
	return nil
}

// Truncated is how many spans the reads so far left out, past the most
// one read keeps (DefaultMaxSpans); 0 when they read everything.
func (j *Jaeger) Truncated() int { return j.truncated }

// services lists the services Jaeger holds spans of.
func (j *Jaeger) services(ctx context.Context) ([]string, error) {
	if j.http != nil {
		return j.httpServices(ctx)
	}
	var resp []byte
	if err := j.conn.Invoke(ctx, "/jaeger.api_v3.QueryService/GetServices", []byte{}, &resp); err != nil {
		return nil, j.wrap(err)
	}
	var services []string
	for b := resp; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, j.wrap(protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, j.wrap(protowire.ParseError(n))
			}
			services, b = append(services, string(v)), b[n:]
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return nil, j.wrap(protowire.ParseError(n))
		}
		b = b[n:]
	}
	return services, nil
}

// maxTraces is the most traces one search returns: push rounds, not
// proxies, since every proxy's push of a round is in the round's trace.
const maxTraces = 1000

// find returns the spans of the traces that hold a span of service with
// every attribute of attrs (exact values), started within the last since:
// whole traces, each with the spans of every tap. One query, whatever the
// number of proxies. Jaeger's HTTP form takes no attributes: its answer
// is filtered here, trace by trace.
func (j *Jaeger) find(ctx context.Context, service string, attrs map[string]string, since time.Duration) ([]span, error) {
	now := time.Now()
	min, max := now.Add(-since), now.Add(time.Minute)
	r := j.reader()
	var err error
	if j.http != nil {
		q := url.Values{}
		q.Set("query.service_name", service)
		q.Set("query.start_time_min", min.UTC().Format(time.RFC3339Nano))
		q.Set("query.start_time_max", max.UTC().Format(time.RFC3339Nano))
		q.Set("query.num_traces", fmt.Sprint(maxTraces))
		err = j.httpTraces(ctx, "/api/v3/traces?"+q.Encode(), r)
	} else {
		var query []byte
		query = protowire.AppendTag(query, 1, protowire.BytesType)
		query = protowire.AppendString(query, service)
		for k, v := range attrs {
			var entry []byte
			entry = protowire.AppendTag(entry, 1, protowire.BytesType)
			entry = protowire.AppendString(entry, k)
			entry = protowire.AppendTag(entry, 2, protowire.BytesType)
			entry = protowire.AppendString(entry, v)
			query = protowire.AppendTag(query, 3, protowire.BytesType)
			query = protowire.AppendBytes(query, entry)
		}
		query = protowire.AppendTag(query, 4, protowire.BytesType)
		query = protowire.AppendBytes(query, timestamp(min))
		query = protowire.AppendTag(query, 5, protowire.BytesType)
		query = protowire.AppendBytes(query, timestamp(max))
		query = protowire.AppendTag(query, 8, protowire.VarintType)
		query = protowire.AppendVarint(query, maxTraces)
		req := protowire.AppendTag(nil, 1, protowire.BytesType)
		req = protowire.AppendBytes(req, query)
		err = j.grpcTraces(ctx, "/jaeger.api_v3.QueryService/FindTraces", req, r)
	}
	if err != nil {
		return nil, err
	}
	spans := r.spans
	if j.http != nil && len(attrs) > 0 {
		spans = withMatch(spans, attrs)
	}
	return spans, nil
}

// trace returns the spans of one trace (hex id); none when Jaeger has no
// such trace.
func (j *Jaeger) trace(ctx context.Context, traceID string) ([]span, error) {
	r := j.reader()
	var err error
	if j.http != nil {
		err = j.httpTraces(ctx, "/api/v3/traces/"+url.PathEscape(traceID), r)
	} else {
		req := protowire.AppendTag(nil, 1, protowire.BytesType)
		req = protowire.AppendString(req, traceID)
		err = j.grpcTraces(ctx, "/jaeger.api_v3.QueryService/GetTrace", req, r)
	}
	if err != nil {
		return nil, err
	}
	return r.spans, nil
}

// grpcTraces calls a method that answers with a stream of TracesData.
func (j *Jaeger) grpcTraces(ctx context.Context, method string, req []byte, r *spanReader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // past maxSpans, the rest of the answer is not read
	stream, err := j.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return j.wrap(err)
	}
	if err := stream.SendMsg(req); err != nil && err != io.EOF {
		return j.wrap(err)
	}
	if err := stream.CloseSend(); err != nil {
		return j.wrap(err)
	}
	for {
		var chunk []byte
		err := stream.RecvMsg(&chunk)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			// Jaeger ends a search or a GetTrace that found nothing with
			// NotFound.
			if status.Code(err) == codes.NotFound {
				return nil
			}
			return j.wrap(err)
		}
		more, err := readTracesData(chunk, r)
		if err != nil {
			return j.wrap(fmt.Errorf("reading its answer: %w", err))
		}
		if !more {
			j.truncated += r.left
			return nil
		}
	}
}

// readTracesData reads a TracesData span by span into r, unmarshalling no
// more spans than r keeps: one message can hold a whole trace of tens of
// thousands. It reports whether to go on.
func readTracesData(b []byte, r *spanReader) (bool, error) {
	more := true
	err := fields(b, func(num protowire.Number, rs []byte) error { // resource_spans
		if num != 1 || !more {
			return nil
		}
		// The resource first, wherever it is: Jaeger writes it after the
		// spans.
		var res map[string]string
		if err := fields(rs, func(num protowire.Number, v []byte) error {
			if num != 1 { // resource
				return nil
			}
			var rp resourcepb.Resource
			if err := proto.Unmarshal(v, &rp); err != nil {
				return err
			}
			res = attrMap(rp.GetAttributes())
			return nil
		}); err != nil {
			return err
		}
		return fields(rs, func(num protowire.Number, v []byte) error {
			if num != 2 { // scope_spans
				return nil
			}
			return fields(v, func(num protowire.Number, sp []byte) error {
				if num != 2 || !more { // spans
					return nil
				}
				var s tracepb.Span
				if err := proto.Unmarshal(sp, &s); err != nil {
					return err
				}
				more = r.add(&s, res)
				return nil
			})
		})
	})
	return more, err
}

// fields calls each with every length-delimited field of the message b,
// skipping the others.
func fields(b []byte, each func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if err := each(num, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// wrap says which Jaeger an error came from, in one line.
func (j *Jaeger) wrap(err error) error {
	if s, ok := status.FromError(err); ok {
		msg := s.Message()
		if s.Code() == codes.Unavailable {
			return fmt.Errorf("Jaeger at %s cannot be reached (is it the gRPC query API, port 16685, or the HTTP one, http://HOST:16686?): %s", j.Target, msg)
		}
		return fmt.Errorf("Jaeger at %s: %s: %s", j.Target, s.Code(), msg)
	}
	return fmt.Errorf("Jaeger at %s: %w", j.Target, err)
}

// timestamp is a google.protobuf.Timestamp's encoding.
func timestamp(t time.Time) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.Unix()))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(t.Nanosecond()))
}

// rawCodec sends and receives messages as their bytes: the requests are
// encoded here with protowire, the answers read as OTLP.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
