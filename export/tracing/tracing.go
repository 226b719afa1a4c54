// Package tracing is the spans output: OpenTelemetry spans of pushes, connections, detector episodes and reference checks, exported over OTLP from a bounded queue.
package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	ccodec "github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// Trace groupings.
const (
	// GroupByVersion puts every push of one push round, from every stream of
	// every tap with the same scope, in one trace: the fleet view. A round
	// is named by its version, and an incremental one by its version, type
	// and content too (track.Push.PushID). Right for istiod.
	GroupByVersion = "version"
	// GroupByStream puts a stream's pushes in the trace of its connect span.
	// Right for control planes whose versions repeat (go-control-plane's "1").
	GroupByStream = "stream"
)

// Config says where spans go and how they are grouped.
type Config struct {
	// Endpoint is the OTLP endpoint URL (--otlp-endpoint); empty leaves it to
	// the standard OTEL_EXPORTER_OTLP_* variables.
	Endpoint string
	// Scope separates meshes that share a collector: it enters every
	// version-derived trace id (--trace-scope, e.g. the mesh id).
	Scope string
	// Grouping is GroupByVersion or GroupByStream.
	Grouping string
	// QueueSize bounds the spans waiting for export.
	QueueSize      int
	ServiceVersion string
	Logger         *slog.Logger
	// Getenv reads the environment (os.Getenv; tests pass their own).
	Getenv func(string) string
	// Exporter, when set, receives the spans instead of an OTLP exporter
	// (the benchmark harness passes one that discards them).
	Exporter sdktrace.SpanExporter
	// MaxSpansPerStream bounds the push and episode spans one stream
	// writes in one trace (--trace-max-spans-per-stream): past it, its
	// pushes fold into an episode span of their own trace. Zero is
	// DefaultMaxSpansPerStream; below zero, no bound.
	MaxSpansPerStream int
}

// DefaultServiceName is the service the spans are of unless
// OTEL_SERVICE_NAME names another: where adstap rollout looks for them.
const DefaultServiceName = "adstap"

// Enabled says whether the configuration asks for spans: an endpoint
// by flag or by OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, and the SDK not disabled.
func Enabled(cfg Config) bool {
	env := cfg.Getenv
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") || env("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return cfg.Endpoint != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Tracing writes OpenTelemetry spans for what the tracker sees: a span per
// push, ending with its outcome; a connect span per stream with its phases;
// a span per detector episode.
type Tracing struct {
	cfg      Config
	provider *sdktrace.TracerProvider
	queue    *spanQueue
	tracer   trace.Tracer

	// What a stream's spans need of its earlier events is on the stream
	// (track.OutputState), so no lock of Tracing's is shared by its streams.
	// connecting lists the streams whose connect span is open, for
	// Shutdown to end: changed when a stream opens and when its connect
	// span ends, never per push.
	connecting sync.Map // stream id → *streamSpans
	versions   versionTraces
	foldCounters
}

var (
	_ track.Sink    = (*Tracing)(nil)
	_ export.Output = (*Tracing)(nil)
)

// streamSpans is what a stream's spans need from its earlier events, kept
// on the stream (track.OutputState). mu guards it: a stream's events come from
// its observation worker and from the tracker's clock.
type streamSpans struct {
	mu   sync.Mutex
	meta track.StreamMeta
	node track.Node
	// connect is open from the stream's start until its full sync; then
	// only its SpanContext is kept (see connectEnded); nil for a stream
	// that has no spans (opaque).
	connect   trace.Span
	firstPush time.Time
	fullSync  bool

	// What every push span of the stream repeats, made once rather than for
	// each of its pushes: each allocation per push is garbage the relay
	// pays for in collector pauses (docs/performance.md, W2).
	inConnect context.Context       // a context whose span is connect: a push's parent
	link      trace.SpanStartOption // the link from a push to connect
	traceHex  string                // connect's trace id, for exemplars; made when first asked for
	// attrsNode is the node pushAttrs were made for: a push carries the node
	// of its stream at the time, which may change.
	attrsNode track.Node
	pushAttrs []attribute.KeyValue // never changed once made: spans being built read it unlocked

	// Folding (otelfold.go): each type's run of repeats and open episode,
	// and how many spans the stream wrote in its latest traces.
	folds     map[string]*fold
	traces    [traceSlots]traceCount
	nextTrace int
}

// connectEnded lets go of the ended connect span, which holds its
// attributes and the SDK's record of it, a kilobyte or two that an idle
// stream would keep for nothing: what the stream's later spans need of it
// is its SpanContext, as a parent or a link, and a context carrying only
// that parents a span as the span itself did (the SDK reads the parent's
// SpanContext; an ended span counts no children). s.mu must be held.
func (s *streamSpans) connectEnded() {
	s.inConnect = trace.ContextWithSpanContext(context.Background(), s.connect.SpanContext())
	s.connect = trace.SpanFromContext(s.inConnect)
}

// pushAttrsFor returns the attributes that open every push span of the
// stream made by node n. s.mu must be held.
func (s *streamSpans) pushAttrsFor(n track.Node) []attribute.KeyValue {
	if s.pushAttrs == nil || s.attrsNode != n {
		attrs := appendNodeAttrs(make([]attribute.KeyValue, 0, 5), n)
		s.pushAttrs = append(attrs, semconv.RPCSystemNameGRPC, semconv.RPCMethodKey.String(rpcMethod(s.meta.Method)))
		s.attrsNode = n
	}
	return s.pushAttrs
}

// New starts exporting spans over OTLP (gRPC unless
// OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says http/protobuf).
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if cfg.Grouping == "" {
		cfg.Grouping = GroupByVersion
	}
	if cfg.Grouping != GroupByVersion && cfg.Grouping != GroupByStream {
		return nil, fmt.Errorf("trace grouping %q: want %s or %s", cfg.Grouping, GroupByVersion, GroupByStream)
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 4096
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	exp := cfg.Exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, cfg); err != nil {
			return nil, err
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName), semconv.ServiceVersion(cfg.ServiceVersion)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: building the resource: %w", err)
	}
	t := &Tracing{cfg: cfg, queue: newSpanQueue(exp, cfg.QueueSize, cfg.Logger)}
	switch {
	case cfg.MaxSpansPerStream == 0:
		t.maxSpans = DefaultMaxSpansPerStream
	case cfg.MaxSpansPerStream > 0:
		t.maxSpans = cfg.MaxSpansPerStream
	}
	// The sampler is the SDK's default, which follows OTEL_TRACES_SAMPLER.
	t.provider = sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(t.queue),
		sdktrace.WithIDGenerator(&idGenerator{}),
	)
	t.tracer = t.provider.Tracer("github.com/adstap/adstap")
	return t, nil
}

func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	protocol := cfg.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = cfg.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "grpc":
		// gRPC's default backoff grows to two minutes: a collector back from
		// an outage would wait that long for its spans.
		opts := []otlptracegrpc.Option{otlptracegrpc.WithDialOption(grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))}
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/gRPC exporter: %w", err)
		}
		return exp, nil
	case "http/protobuf":
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP/HTTP exporter: %w", err)
		}
		return exp, nil
	}
	return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", protocol)
}

// Dropped is the number of spans that never reached the collector.
func (t *Tracing) Dropped() uint64 {
	if t == nil {
		return 0
	}
	return t.queue.Dropped() + t.traceLimit.Load()
}

// Name is export.TracingOutput.
func (t *Tracing) Name() string { return export.TracingOutput }

// Close is Shutdown, for the pipeline's loop over its outputs; its error
// names the output.
func (t *Tracing) Close(ctx context.Context) error {
	if err := t.Shutdown(ctx); err != nil {
		return fmt.Errorf("%s: flushing spans: %w", export.TracingOutput, err)
	}
	return nil
}

// Shutdown ends open connect spans and exports what is queued, within ctx.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	t.endAllEpisodes()
	t.connecting.Range(func(id, v any) bool {
		s := v.(*streamSpans)
		s.mu.Lock()
		if !s.fullSync {
			s.fullSync = true
			s.connect.End()
		}
		s.mu.Unlock()
		t.connecting.Delete(id)
		return true
	})
	return t.provider.Shutdown(ctx)
}

// VersionTraceID is the trace every push of version shares, in every tap
// configured with the same scope: a hash, so independent taps agree without
// talking, and a ratio sampler keeps or drops the whole version together.
// Tracing passes a push's id (track.Push.PushID), which is the version for
// a full push and a push answering requests.
func VersionTraceID(scope, version string) trace.TraceID {
	// Hashed from a buffer on the stack: a concatenated string would be
	// garbage for every push.
	var buf [128]byte
	b := append(buf[:0], "adstap/push-version\x00"...)
	b = append(b, scope...)
	b = append(b, 0)
	b = append(b, version...)
	sum := sha256.Sum256(b)
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// versionTraces remembers the trace ids of the latest versions. Every stream
// gets a control plane's new version within moments, and each of its pushes
// needs the trace id twice (its span, the exemplar of its ACK latency): made
// once per version rather than per push, they make no garbage. Read without
// a lock: an entry is made whole, then put in place of the oldest.
type versionTraces struct {
	recent [8]atomic.Pointer[versionTrace]
	next   atomic.Uint32 // the entry to replace next
}

// versionTrace is a version's trace; never changed once made.
type versionTrace struct {
	version string
	id      trace.TraceID
	ctx     context.Context // carries the trace id to idGenerator
	hex     [32]byte        // the trace id as text
}

// entry returns version's entry, making one in place of the oldest if need
// be. Two goroutines that make the same one at once both put it in: the
// same trace, in two places, until it is the oldest.
func (v *versionTraces) entry(scope, version string) *versionTrace {
	for i := range v.recent {
		if e := v.recent[i].Load(); e != nil && e.version == version {
			return e
		}
	}
	id := VersionTraceID(scope, version)
	e := &versionTrace{version: version, id: id, ctx: withTraceID(context.Background(), id)}
	hex.Encode(e.hex[:], id[:])
	v.recent[(v.next.Add(1)-1)%uint32(len(v.recent))].Store(e)
	return e
}

// context is a context that gives the spans started in it version's trace.
func (v *versionTraces) context(scope, version string) context.Context {
	return v.entry(scope, version).ctx
}

// hex is version's trace id as text (trace.TraceID.String): the entry's own
// bytes, which never change, so that an exemplar's id costs no copy.
func (v *versionTraces) hex(scope, version string) string {
	e := v.entry(scope, version)
	return unsafe.String(&e.hex[0], len(e.hex))
}

// TraceIDFor is the trace id of a push's span, for metric exemplars; "" when
// the push's trace is not known.
func (t *Tracing) TraceIDFor(p *track.Push) string {
	if t == nil {
		return ""
	}
	if t.cfg.Grouping == GroupByVersion && p.Version != "" {
		return t.versions.hex(t.cfg.Scope, p.PushID())
	}
	if s := t.stream(p.Ref); s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.traceHex == "" {
			s.traceHex = s.connect.SpanContext().TraceID().String()
		}
		return s.traceHex
	}
	return ""
}

// stream is what the spans of stream r need, nil for a stream with no
// spans or an event from outside a tracker.
func (t *Tracing) stream(r *track.StreamRef) *streamSpans {
	s := track.OutputState[streamSpans](r, t)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	open := s.connect != nil
	s.mu.Unlock()
	if !open {
		return nil
	}
	return s
}

// OnEvent turns tracker events into spans.
func (t *Tracing) OnEvent(e track.Event) {
	switch e := e.(type) {
	case track.StreamOpened:
		t.streamOpened(e.Stream, e.Ref)
	case track.PushSent:
		if s := t.stream(e.Push.Ref); s != nil {
			s.mu.Lock()
			s.node = e.Push.Node
			if s.firstPush.IsZero() {
				s.firstPush = e.Push.SentAt
			}
			s.mu.Unlock()
		}
	case track.PushEnded:
		t.pushEnded(e)
	case track.FullSyncComplete:
		t.fullSync(e)
	case track.StreamClosed:
		t.streamClosed(e)
	case track.DetectorStarted:
		t.detectorState(e.Detector, e.Ref, e.TypeURL, true)
		t.detector(e.Detector, e.Key, e.StreamID, e.Ref, e.Node, e.TypeURL, e.At, e.At, e.Count, e.Detail, true)
	case track.DetectorEnded:
		t.detectorState(e.Detector, e.Ref, e.TypeURL, false)
		t.detector(e.Detector, e.Key, e.StreamID, e.Ref, e.Node, e.TypeURL, e.At.Add(-e.Duration), e.At, e.Count, "", false)
	}
}

// rpcMethod is rpc.method as the semantic conventions spell it: no leading slash.
func rpcMethod(m string) string { return strings.TrimPrefix(m, "/") }

func (t *Tracing) streamOpened(m track.StreamMeta, ref *track.StreamRef) {
	if m.Protocol == ccodec.Opaque || ref == nil {
		return
	}
	start := m.OpenedAt
	if m.Connect != nil && !m.Connect.Start.IsZero() && m.Connect.Start.Before(start) {
		start = m.Connect.Start
	}
	ctx, connect := t.tracer.Start(context.Background(), "connect",
		trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			semconv.RPCSystemNameGRPC,
			semconv.RPCMethodKey.String(rpcMethod(m.Method)),
			attribute.Int64("xds.stream.id", int64(m.ID)),
			attribute.Int64("xds.connection.id", int64(m.ConnID)),
			attribute.String("xds.protocol", string(m.Protocol)),
			attribute.String("client.address", m.Peer),
		))
	// The upstream connection's phases, when this stream is the one that
	// brought it up; later streams on the connection reuse it.
	if c := m.Connect; c != nil {
		at := c.Start
		for _, ph := range []struct {
			name string
			d    time.Duration
		}{{"dns", c.DNS}, {"tcp", c.TCP}, {"tls", c.TLS}} {
			if ph.d <= 0 {
				continue
			}
			_, s := t.tracer.Start(ctx, ph.name, trace.WithTimestamp(at), trace.WithAttributes(attribute.String("server.address", c.Upstream)))
			if c.FailedPhase == ph.name {
				s.SetStatus(codes.Error, c.Err.Error())
			}
			s.End(trace.WithTimestamp(at.Add(ph.d)))
			at = at.Add(ph.d)
		}
	} else {
		connect.SetAttributes(attribute.Bool("xds.connection.reused", true))
	}
	s := track.OutputState[streamSpans](ref, t)
	s.mu.Lock()
	s.meta, s.connect, s.inConnect = m, connect, ctx
	s.link = trace.WithLinks(trace.Link{SpanContext: connect.SpanContext(), Attributes: streamLinkAttrs})
	s.mu.Unlock()
	t.connecting.Store(m.ID, s)
}

// fullSync ends the connect span with its last two phases: HTTP/2 and the
// first response, then the full sync.
func (t *Tracing) fullSync(e track.FullSyncComplete) {
	s := t.stream(e.Ref)
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.fullSync {
		s.mu.Unlock()
		return
	}
	s.fullSync = true
	ctx, connect, firstPush := s.inConnect, s.connect, s.firstPush
	s.mu.Unlock()
	t.connecting.Delete(e.StreamID)
	opened := s.meta.OpenedAt
	if !firstPush.IsZero() {
		_, fr := t.tracer.Start(ctx, "first response", trace.WithTimestamp(opened))
		fr.End(trace.WithTimestamp(firstPush))
	}
	_, fs := t.tracer.Start(ctx, "full sync", trace.WithTimestamp(opened),
		trace.WithAttributes(attribute.StringSlice("xds.types", shortTypes(e.Types))))
	end := opened.Add(e.Elapsed)
	fs.End(trace.WithTimestamp(end))
	connect.SetAttributes(nodeAttrs(e.Node)...)
	connect.SetAttributes(attribute.Float64("xds.full_sync.seconds", e.Elapsed.Seconds()))
	connect.End(trace.WithTimestamp(end))
	s.mu.Lock()
	s.connectEnded()
	s.mu.Unlock()
}

func (t *Tracing) streamClosed(e track.StreamClosed) {
	s := t.stream(e.Ref)
	if s == nil {
		return
	}
	s.mu.Lock()
	t.endFolds(s)
	done := s.fullSync
	s.fullSync = true
	s.mu.Unlock()
	if done {
		return
	}
	t.connecting.Delete(e.Stream.ID)
	// The stream ended before its full sync: its connect span says so.
	s.connect.SetAttributes(nodeAttrs(e.Node)...)
	s.connect.SetAttributes(attribute.Bool("xds.full_sync.complete", false))
	s.connect.SetStatus(codes.Error, "stream closed before its full sync: "+e.Message)
	s.connect.End(trace.WithTimestamp(e.At))
}

func (t *Tracing) pushEnded(e track.PushEnded) {
	p := e.Push
	s := t.stream(p.Ref)
	var streamAttrs []attribute.KeyValue
	var pl pushPlace
	if s != nil {
		s.mu.Lock()
		pl = t.placeOf(s, p)
		switch t.decide(s, e, pl) {
		case spanFold:
			s.mu.Unlock()
			return
		case spanDrop:
			s.mu.Unlock()
			e.Changed.Release()
			t.traceLimit.Add(1)
			return
		}
		streamAttrs = s.pushAttrsFor(p.Node)
		s.mu.Unlock()
	} else {
		pl = t.placeOf(nil, p)
	}
	sc := t.pushSpan(e, s != nil, streamAttrs, pl)
	if s != nil {
		s.mu.Lock()
		s.made(p.TypeURL, pl, sc)
		s.mu.Unlock()
	}
}

// pushSpan makes e's span where pl says, and returns its SpanContext.
func (t *Tracing) pushSpan(e track.PushEnded, onStream bool, streamAttrs []attribute.KeyValue, pl pushPlace) trace.SpanContext {
	p := e.Push
	// Everything built only for the span's making comes from a pool: the
	// SDK copies what it keeps.
	sc := pushScratchPool.Get().(*pushScratch)
	defer sc.release()
	opts := append(sc.start[:0], trace.WithTimestamp(p.SentAt), serverKind)
	opts = append(opts, pl.startOpts()...)
	ctx, pushID := pl.ctx, pl.pushID
	// The attributes are set once the span exists, not passed as a start
	// option: trace.WithAttributes would copy them once more, and the
	// sampler (the SDK's, chosen by OTEL_TRACES_SAMPLER) does not read them.
	_, span := t.tracer.Start(ctx, pushSpanName(p.Type), opts...)
	if span.IsRecording() {
		attrs := sc.attrs[:0]
		if onStream {
			attrs = append(attrs, streamAttrs...)
		} else {
			attrs = append(appendNodeAttrs(attrs, p.Node), semconv.RPCSystemNameGRPC, semconv.RPCMethodKey.String(""))
		}
		attrs = append(attrs,
			attribute.String("xds.type_url", p.TypeURL),
			attribute.String("xds.type", p.Type),
			attribute.String("xds.version", p.Version),
			attribute.String("xds.nonce", p.Nonce),
			attribute.Int64("xds.stream.id", int64(p.StreamID)),
			attribute.Int("xds.resources.count", p.Resources),
			attribute.Int("xds.resources.added", p.Diff.Added),
			attribute.Int("xds.resources.removed", p.Diff.Removed),
			attribute.Int("xds.resources.changed", p.Diff.Changed),
			attribute.Int("xds.resources.unchanged", p.Diff.Unchanged),
			attribute.Int("xds.response.bytes", p.Bytes),
			attribute.Bool("xds.full_sync", p.FullSync),
			attribute.Bool("xds.full_push", p.FullPush),
			attribute.Bool("xds.redundant", p.Redundant),
			attribute.String("xds.result", string(e.Result)),
			attribute.Float64("xds.latency_ms", float64(e.Latency.Microseconds())/1000),
		)
		if pushID != "" {
			attrs = append(attrs, attribute.String("xds.push_id", pushID))
		}
		if len(p.Diff.AddedNames) > 0 {
			attrs = append(attrs, attribute.StringSlice("xds.resources.added_names", p.Diff.AddedNames))
		}
		if len(p.Diff.RemovedNames) > 0 {
			attrs = append(attrs, attribute.StringSlice("xds.resources.removed_names", p.Diff.RemovedNames))
		}
		if len(p.Diff.ChangedNames) > 0 {
			attrs = append(attrs, attribute.StringSlice("xds.resources.changed_names", p.Diff.ChangedNames))
		}
		if e.Result == track.ResultNACK {
			attrs = append(attrs, attribute.Int("xds.error.code", int(e.ErrorCode)), attribute.String("xds.error.message", e.Error))
			if len(e.ErrorNames) > 0 {
				attrs = append(attrs, attribute.StringSlice("xds.error.resources", e.ErrorNames))
			}
		}
		span.SetAttributes(attrs...)
		sc.attrs = attrs
	}
	// What the push kept of the resources it changed, and what its NACK
	// rejected, go with its span to the span queue, whose own goroutine
	// reads their Istio objects (spanQueue.run); never this one, the
	// tracker's.
	rejected := e.Rejected
	if e.Result != track.ResultNACK || (rejected != nil && rejected.NotKept != "") {
		rejected = nil
	}
	if e.Changed != nil || rejected != nil {
		if span.IsRecording() && span.SpanContext().IsSampled() {
			origin.Claim(rejected)
			t.queue.objects.expect(span.SpanContext().SpanID(), kept{changed: e.Changed, rejected: rejected})
		} else {
			e.Changed.Release()
		}
	}
	switch e.Result {
	case track.ResultNACK:
		span.SetStatus(codes.Error, e.Error)
	case track.ResultTimeout:
		span.SetStatus(codes.Error, "no answer within the push timeout: the stream is "+string(track.StateStale))
	}
	sc.end[0] = trace.WithTimestamp(e.At)
	span.End(sc.end[:]...)
	return span.SpanContext()
}

// maxPushAttrs is the most attributes a push span has: node (3), rpc (2),
// the push (17), its names (3), its NACK (3), its source (2) and the
// objects of what it changed (2).
const maxPushAttrs = 32

// pushScratch is what making a push span needs only until the span ends.
type pushScratch struct {
	attrs []attribute.KeyValue
	start [4]trace.SpanStartOption
	end   [1]trace.SpanEndOption
}

var pushScratchPool = sync.Pool{New: func() any {
	return &pushScratch{attrs: make([]attribute.KeyValue, 0, maxPushAttrs)}
}}

// release clears sc, so that the pool holds on to no push's strings, and
// gives it back.
func (sc *pushScratch) release() {
	clear(sc.attrs)
	sc.attrs = sc.attrs[:0]
	clear(sc.start[:])
	clear(sc.end[:])
	pushScratchPool.Put(sc)
}

// Span start options and link attributes that never change, made once.
var (
	serverKind      = trace.WithSpanKind(trace.SpanKindServer)
	newRoot         = trace.WithNewRoot()
	streamLinkAttrs = []attribute.KeyValue{attribute.String("xds.link", "stream")}
)

// pushSpanNames are the names of push spans by short type (codec.ShortType,
// a fixed set), so that naming a span allocates nothing.
var pushSpanNames = func() map[string]string {
	m := map[string]string{}
	for _, t := range shared.ShortTypes {
		m[t] = strings.ToUpper(t) + " push"
	}
	return m
}()

func pushSpanName(shortType string) string {
	if n, ok := pushSpanNames[shortType]; ok {
		return n
	}
	return strings.ToUpper(shortType) + " push"
}

func (t *Tracing) detector(name, key string, stream uint64, ref *track.StreamRef, node, typeURL string, start, end time.Time, count int, detail string, started bool) {
	opName := name
	if started {
		opName += " started"
	}
	attrs := []attribute.KeyValue{
		attribute.String("xds.detector", name),
		attribute.String("xds.detector.key", key),
		attribute.Int("xds.detector.count", count),
		attribute.Bool("xds.detector.active", started),
	}
	if node != "" {
		attrs = append(attrs, attribute.String("xds.node.id", node))
	}
	if typeURL != "" {
		attrs = append(attrs, attribute.String("xds.type_url", typeURL), attribute.String("xds.type", ccodec.ShortType(typeURL)))
	}
	if stream != 0 {
		attrs = append(attrs, attribute.Int64("xds.stream.id", int64(stream)))
	}
	if detail != "" {
		attrs = append(attrs, attribute.String("xds.detector.detail", detail))
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithTimestamp(start), trace.WithAttributes(attrs...)}
	if s := t.stream(ref); s != nil {
		s.mu.Lock()
		sc := s.connect.SpanContext()
		s.mu.Unlock()
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	_, span := t.tracer.Start(context.Background(), opName, opts...)
	if started {
		span.SetStatus(codes.Error, detail)
	}
	span.End(trace.WithTimestamp(end))
}

func nodeAttrs(n track.Node) []attribute.KeyValue { return appendNodeAttrs(nil, n) }

func appendNodeAttrs(attrs []attribute.KeyValue, n track.Node) []attribute.KeyValue {
	if n.ID == "" {
		return attrs
	}
	attrs = append(attrs, attribute.String("xds.node.id", n.ID))
	if n.Cluster != "" {
		attrs = append(attrs, attribute.String("xds.node.cluster", n.Cluster))
	}
	if n.UserAgent != "" {
		attrs = append(attrs, attribute.String("user_agent.original", n.UserAgent))
	}
	return attrs
}

func shortTypes(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = ccodec.ShortType(u)
	}
	return out
}

// idGenerator makes random ids, except the trace id a context asks for: a
// push's trace id comes from its version.
type idGenerator struct{}

type traceIDKey struct{}

func withTraceID(ctx context.Context, id trace.TraceID) context.Context {
	return context.WithValue(ctx, traceIDKey{}, id)
}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	tid, ok := ctx.Value(traceIDKey{}).(trace.TraceID)
	if !ok || !tid.IsValid() {
		rand.Read(tid[:])
	}
	return tid, newSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		rand.Read(id[:])
	}
	return id
}
