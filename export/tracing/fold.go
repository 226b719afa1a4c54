package tracing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// Folding. A control plane stuck re-sending a rejected push
// (go-control-plane's snapshot cache does it thousands of times a second)
// or re-sending the same content again and again would otherwise write a
// span per push, tens of thousands in one trace, which Jaeger's UI cannot
// draw and collectors cut. As the live log folds identical NACK lines, the
// spans fold repeats: per stream and type, the first FoldAfter pushes of a
// run of repeats keep spans of their own, and the rest become one episode
// span, which counts them and links to the run's first push span.
const (
	// FoldAfter is how many pushes of a run of repeats keep spans of
	// their own, so that the run's start is visible push by push.
	FoldAfter = 3
	// FoldInterval bounds an episode span: one still going after it is
	// ended, and its run goes on in a new episode span in a new trace,
	// linked to the first, so that no span stays open and no trace grows
	// without end.
	FoldInterval = 30 * time.Second
	// DefaultMaxSpansPerStream is the most push and episode spans one
	// stream writes in one trace (--trace-max-spans-per-stream): past it,
	// its pushes fold into an episode span in a trace of its own.
	DefaultMaxSpansPerStream = 300
	// maxFoldTypes bounds the types a stream folds: a client asking for
	// more type URLs than that gets no folding for the rest (the bound per
	// trace still holds, by dropping).
	maxFoldTypes = 16
	// traceSlots is how many recent traces a stream counts its spans in:
	// a stream writes to the trace of its latest push round, seldom to an
	// older one.
	traceSlots = 4
)

// Why pushes were folded, as xds.folded.reason says it.
const (
	foldRepeated   = "repeated"    // the same content with the same answer, again
	foldStorm      = "nack_storm"  // NACKs while the tracker's NACK storm or loop detector is on
	foldTraceLimit = "trace_limit" // the stream reached --trace-max-spans-per-stream in the push's trace
)

// fold is a stream × type's run of repeats and its open episode. Guarded
// by its stream's streamSpans.mu.
type fold struct {
	typeURL, typ string
	// The run: what its pushes repeat, and how many there were.
	content uint64
	version string
	result  track.PushResult
	message string
	run     int
	storm   bool // a NACK storm or loop is on for the stream × type
	// first is the span of the run's first push, which the episode links to.
	first trace.SpanContext
	// firstEpisode is the run's first episode span, which a later episode
	// of the same run links to.
	firstEpisode trace.SpanContext
	ep           *episode
}

// episode is an open episode span and what it folded.
type episode struct {
	span                  trace.Span
	sc                    trace.SpanContext
	start, last           time.Time
	reason                string
	pushes, acks, nacks   int
	firstNonce, lastNonce string
	version, pushID       string
	continues             bool
	errCode               int32
	errMessage            string
	errNames              []string
	bytes                 int
	resources             int
}

// traceCount is how many spans a stream wrote in one trace.
type traceCount struct {
	id trace.TraceID
	n  int
}

// foldFor is the fold of s's type, made on its first push; nil past
// maxFoldTypes. s.mu must be held.
func (s *streamSpans) foldFor(typeURL, typ string) *fold {
	if f := s.folds[typeURL]; f != nil {
		return f
	}
	if len(s.folds) >= maxFoldTypes {
		return nil
	}
	if s.folds == nil {
		s.folds = map[string]*fold{}
	}
	f := &fold{typeURL: typeURL, typ: typ}
	s.folds[typeURL] = f
	return f
}

// spansIn is how many spans s wrote in trace id. s.mu must be held.
func (s *streamSpans) spansIn(id trace.TraceID) int {
	for _, c := range s.traces {
		if c.id == id {
			return c.n
		}
	}
	return 0
}

// wrote counts one more span of s in trace id. s.mu must be held.
func (s *streamSpans) wrote(id trace.TraceID) {
	for i := range s.traces {
		if s.traces[i].id == id {
			s.traces[i].n++
			return
		}
	}
	s.traces[s.nextTrace] = traceCount{id: id, n: 1}
	s.nextTrace = (s.nextTrace + 1) % len(s.traces)
}

// pushPlace is where a push's span goes: its trace and how to start it.
type pushPlace struct {
	ctx    context.Context
	id     trace.TraceID
	pushID string
	opts   [2]trace.SpanStartOption // newRoot and the link to connect, as the case may be
	nopts  int
}

// startOpts are pl's start options.
func (pl *pushPlace) startOpts() []trace.SpanStartOption { return pl.opts[:pl.nopts] }

// placeOf is where p's span goes, by the grouping: s.mu must be held when
// s is not nil.
func (t *Tracing) placeOf(s *streamSpans, p *track.Push) pushPlace {
	var pl pushPlace
	pl.ctx = context.Background()
	if s != nil && (t.cfg.Grouping == GroupByStream || p.Version == "") {
		pl.ctx = s.inConnect
		pl.id = trace.SpanContextFromContext(s.inConnect).TraceID()
	}
	if t.cfg.Grouping == GroupByVersion && p.Version != "" {
		// One trace per push round, across streams and taps: the version
		// for a full push, more for an incremental one (track.Push.PushID).
		pl.pushID = p.PushID()
		e := t.versions.entry(t.cfg.Scope, pl.pushID)
		pl.ctx, pl.id = e.ctx, e.id
		pl.opts[0], pl.nopts = newRoot, 1
		if s != nil {
			pl.opts[1], pl.nopts = s.link, 2
		}
	}
	return pl
}

// foldDecision is what becomes of a push's span.
type foldDecision int

const (
	spanOwn  foldDecision = iota // a span of its own
	spanFold                     // folded into its episode
	spanDrop                     // dropped: past the bound, with no fold to take it
)

// decide says what becomes of e's span, and folds it when it is to be
// folded. s.mu must be held.
func (t *Tracing) decide(s *streamSpans, e track.PushEnded, pl pushPlace) foldDecision {
	p := e.Push
	f := s.foldFor(p.TypeURL, p.Type)
	over := t.maxSpans > 0 && pl.id.IsValid() && s.spansIn(pl.id) >= t.maxSpans
	if f == nil {
		if over {
			return spanDrop
		}
		return spanOwn
	}
	// A repeat is the same push (content and version: another version is
	// another push round, in a trace of its own) with the same answer; in
	// a NACK storm, any NACK of the version.
	same := f.run > 0 && f.content == p.Content && f.version == p.Version && f.result == e.Result && f.message == e.Error
	stormed := f.run > 0 && f.storm && e.Result == track.ResultNACK && f.result == track.ResultNACK && f.version == p.Version
	switch {
	case over && f.ep != nil:
		// Past the bound, whatever comes joins the open episode.
	case same || stormed:
		f.run++
	default:
		t.endEpisode(s, f)
		f.run, f.first, f.firstEpisode = 1, trace.SpanContext{}, trace.SpanContext{}
	}
	f.content, f.version, f.result, f.message = p.Content, p.Version, e.Result, e.Error
	if !over && f.run <= FoldAfter {
		return spanOwn
	}
	reason := foldRepeated
	switch {
	case over:
		reason = foldTraceLimit
	case stormed && !same:
		reason = foldStorm
	}
	t.foldInto(s, f, e, pl, reason, over)
	return spanFold
}

// made records the span a push got: the first of its run is what an
// episode links to. s.mu must be held.
func (s *streamSpans) made(typeURL string, pl pushPlace, sc trace.SpanContext) {
	if pl.id.IsValid() {
		s.wrote(pl.id)
	}
	if f := s.folds[typeURL]; f != nil && f.run == 1 {
		f.first = sc
	}
}

// foldInto adds e to f's episode, opening one (or the next, past
// FoldInterval) if need be. s.mu must be held.
func (t *Tracing) foldInto(s *streamSpans, f *fold, e track.PushEnded, pl pushPlace, reason string, over bool) {
	p := e.Push
	if f.ep != nil && e.At.Sub(f.ep.start) >= FoldInterval {
		t.endEpisode(s, f)
	}
	ep := f.ep
	opened := false
	if ep == nil {
		ep = t.openEpisode(s, f, p, pl, reason, over)
		opened = true
	}
	ep.pushes++
	switch e.Result {
	case track.ResultACK:
		ep.acks++
	case track.ResultNACK:
		ep.nacks++
		if ep.errMessage == "" {
			ep.errCode, ep.errMessage, ep.errNames = e.ErrorCode, e.Error, e.ErrorNames
			// The objects of what the first NACK rejected go with the
			// episode span, read by the span queue as a push span's are.
			if r := e.Rejected; r != nil && r.NotKept == "" && ep.span.SpanContext().IsSampled() {
				origin.Claim(r)
				t.queue.objects.expect(ep.sc.SpanID(), kept{rejected: r})
			}
		}
	}
	if ep.firstNonce == "" {
		ep.firstNonce = p.Nonce
	}
	ep.lastNonce, ep.last, ep.version = p.Nonce, e.At, p.Version
	ep.bytes, ep.resources = p.Bytes, p.Resources
	e.Changed.Release()
	if fn := t.folded; fn != nil {
		if opened {
			fn(p.Type, ep.sc.TraceID().String(), ep.sc.SpanID().String())
		} else {
			fn(p.Type, "", "")
		}
	}
}

// openEpisode starts f's episode span at p: in p's trace, linked to the
// run's first push span, unless the stream reached its bound there or the
// run had an episode already, whose next goes to a trace of its own,
// linked to the first. s.mu must be held.
func (t *Tracing) openEpisode(s *streamSpans, f *fold, p *track.Push, pl pushPlace, reason string, over bool) *episode {
	ep := &episode{start: p.SentAt, reason: reason, pushID: pl.pushID}
	opts := []trace.SpanStartOption{trace.WithTimestamp(p.SentAt), serverKind}
	ctx := pl.ctx
	var links []trace.Link
	switch {
	case f.firstEpisode.IsValid():
		ep.continues = true
		ctx = context.Background()
		opts = append(opts, newRoot)
		links = append(links, trace.Link{SpanContext: f.firstEpisode, Attributes: episodeLinkAttrs})
	case over:
		ctx = context.Background()
		opts = append(opts, newRoot)
	default:
		opts = append(opts, pl.startOpts()...)
	}
	if f.first.IsValid() {
		links = append(links, trace.Link{SpanContext: f.first, Attributes: firstPushLinkAttrs})
	}
	if len(links) > 0 {
		opts = append(opts, trace.WithLinks(links...))
	}
	_, ep.span = t.tracer.Start(ctx, pushSpanName(f.typ)+" (folded)", opts...)
	ep.sc = ep.span.SpanContext()
	if !f.firstEpisode.IsValid() {
		f.firstEpisode = ep.sc
	}
	if id := ep.sc.TraceID(); !ep.continues && !over {
		s.wrote(id)
	}
	f.ep = ep
	t.episodes.Store(f, s)
	t.openEpisodes.Add(1)
	return ep
}

// endEpisode ends f's episode span, if one is open, with what it folded.
// s.mu must be held.
func (t *Tracing) endEpisode(s *streamSpans, f *fold) {
	ep := f.ep
	if ep == nil {
		return
	}
	f.ep = nil
	t.episodes.Delete(f)
	t.openEpisodes.Add(-1)
	result := f.result
	if ep.nacks > 0 {
		result = track.ResultNACK // rollout reads the episode as the NACKs it stands for
	}
	attrs := append(append(make([]attribute.KeyValue, 0, 24), s.pushAttrsFor(s.node)...),
		attribute.String("xds.type_url", f.typeURL),
		attribute.String("xds.type", f.typ),
		attribute.String("xds.version", ep.version),
		attribute.Int64("xds.stream.id", int64(s.meta.ID)),
		attribute.String("xds.result", string(result)),
		attribute.Int("xds.folded.count", ep.pushes),
		attribute.Int("xds.folded.acks", ep.acks),
		attribute.Int("xds.folded.nacks", ep.nacks),
		attribute.String("xds.folded.reason", ep.reason),
		attribute.String("xds.folded.first_nonce", ep.firstNonce),
		attribute.String("xds.folded.last_nonce", ep.lastNonce),
		attribute.Bool("xds.folded.continues", ep.continues),
		attribute.Int("xds.resources.count", ep.resources),
		attribute.Int("xds.response.bytes", ep.bytes),
	)
	if ep.pushID != "" {
		attrs = append(attrs, attribute.String("xds.push_id", ep.pushID))
	}
	if ep.nacks > 0 {
		attrs = append(attrs, attribute.Int("xds.error.code", int(ep.errCode)), attribute.String("xds.error.message", ep.errMessage))
		if len(ep.errNames) > 0 {
			attrs = append(attrs, attribute.StringSlice("xds.error.resources", ep.errNames))
		}
		ep.span.SetStatus(codes.Error, ep.errMessage)
	}
	ep.span.SetAttributes(attrs...)
	ep.span.End(trace.WithTimestamp(ep.last))
}

// endFolds ends every episode of s: its stream closed. s.mu must be held.
func (t *Tracing) endFolds(s *streamSpans) {
	for _, f := range s.folds {
		t.endEpisode(s, f)
	}
}

// detectorState marks a stream × type as in a NACK storm or loop, or no
// longer, for folding.
func (t *Tracing) detectorState(detector string, ref *track.StreamRef, typeURL string, on bool) {
	if detector != track.DetectorNACKStorm && detector != track.DetectorNACKLoop {
		return
	}
	s := t.stream(ref)
	if s == nil || typeURL == "" {
		return
	}
	s.mu.Lock()
	if f := s.folds[typeURL]; f != nil {
		f.storm = on
	}
	s.mu.Unlock()
}

// Tick ends the episode spans open for FoldInterval by now; their runs go
// on in new episode spans if they go on. Call it on the tracker's clock:
// it takes the lock of each stream with an open episode, none other.
func (t *Tracing) Tick(now time.Time) {
	if t == nil || t.openEpisodes.Load() == 0 {
		return
	}
	t.episodes.Range(func(k, v any) bool {
		f, s := k.(*fold), v.(*streamSpans)
		s.mu.Lock()
		if f.ep != nil && now.Sub(f.ep.start) >= FoldInterval {
			t.endEpisode(s, f)
		}
		s.mu.Unlock()
		return true
	})
}

// endAllEpisodes ends every open episode span, at Shutdown.
func (t *Tracing) endAllEpisodes() {
	t.episodes.Range(func(k, v any) bool {
		f, s := k.(*fold), v.(*streamSpans)
		s.mu.Lock()
		t.endEpisode(s, f)
		s.mu.Unlock()
		return true
	})
}

// Take has tr hand over what each push that ended changed (track.Changed),
// which the spans read the Istio objects of; call it before tr tracks a
// stream.
func (t *Tracing) Take(tr *track.Tracker) { tr.TakeChanged() }

// CountFolds has fn told of every push folded into an episode span, by
// type; with the episode's trace and span ids (hex) for the first push
// of each episode, for an exemplar, empty for the rest. Call it before
// events flow.
func (t *Tracing) CountFolds(fn func(typ, traceID, spanID string)) {
	if t != nil {
		t.folded = fn
	}
}

// Drops are the spans that never reached the collector, by why.
func (t *Tracing) Drops() export.SpanDrops {
	if t == nil {
		return export.SpanDrops{}
	}
	return export.SpanDrops{QueueFull: t.queue.queueFull.Load(), ExportFailed: t.queue.exportFailed.Load(), TraceLimit: t.traceLimit.Load()}
}

// Link attributes of episode spans, made once.
var (
	firstPushLinkAttrs = []attribute.KeyValue{attribute.String("xds.link", "first push")}
	episodeLinkAttrs   = []attribute.KeyValue{attribute.String("xds.link", "first episode")}
)

// foldCounters is Tracing's state for folding that is not a stream's.
type foldCounters struct {
	episodes     sync.Map // *fold → *streamSpans: the open episodes, changed when one opens or ends
	openEpisodes atomic.Int64
	traceLimit   atomic.Uint64
	folded       func(typ, traceID, spanID string)
	maxSpans     int
}
