// Package references is the reference check: what each proxy accepted checked for references that dangle, reported in the log, on the pages, as metrics and on spans.
package references

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/outq"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/refgraph"
	"github.com/adstap/adstap/track"
)

// DefaultGrace is how long a proxy may wait for what a resource
// refers to (a listener's route configuration, a cluster's endpoints, a
// secret) before the wait is a dangling reference: Envoy's default
// initial_fetch_timeout, after which it stops waiting and serves without.
const DefaultGrace = 15 * time.Second

// References checks, for every stream, that what the client accepted refers
// only to what it holds: it keeps each stream's reference graph (package
// refgraph: names, not resources) and reports each dangling reference when
// it starts and when it ends, in the live log, on /debug/streams, as metrics
// and on spans.
//
// It is a track.Sink fed by the tracker alone: the tracker keeps each push
// until its answer and hands an accepted one over (track.Accepted, leased
// to the check as a taker of the types it reads and of superseded pushes,
// Take), its resources as the tap decoded them, by reference; the requests
// come with RequestSeen. References never sees a push awaiting its answer
// and never decodes one. It scans what was accepted into the graph on a
// goroutine of its own, behind a bounded queue, and then lets go of it. Beyond the bound the queue holds one
// hand-over larger than the whole bound, so a push bigger than the queue (a
// 40 MB CDS push, the queue 16 MiB) is checked rather than lost, one at a
// time. What does not fit is let go of and counted
// (adstap_output_dropped_total{output="references"}), and the stream it
// belonged to is no longer checked, since its graph would be wrong.
type References struct {
	grace  time.Duration
	log    *slog.Logger
	detail bool
	spans  Spans
	q      *outq.Queue[refOp]
	taker  *track.Taker
	// large is set while the hand-over held beyond the queue's bound waits.
	large atomic.Bool

	// scans are shared by the streams' graphs while there are several: a
	// push sent to a thousand streams is scanned once (nil with one
	// stream, a sidecar's, which would only hold its scans twice).
	scans *refgraph.Scans
	// sharedHits and sharedMisses are the lookups of scans let go of.
	sharedHits, sharedMisses uint64

	mu      sync.Mutex
	streams map[uint64]*refStream

	open      *prometheus.GaugeVec
	found     *prometheus.CounterVec
	mbbWindow *prometheus.HistogramVec
}

type refStream struct {
	graph *refgraph.Graph
	node  string
	ref   *track.StreamRef // from its first verdict, for the spans
	// off says why the stream's references are no longer checked.
	off string
	// answering is a request that answers the latest push of its type,
	// applied once that push's answer is: the client applies the push
	// before what its request changes of the subscription. Held by value,
	// so that an op, which holds a whole push, is not moved to the heap for it.
	answering pendingRequest
}

// pendingRequest is a request held until the push it answers has ended;
// req is nil when none is.
type pendingRequest struct {
	req *codec.Request
	at  time.Time
}

type refOp struct {
	kind   uint8
	stream uint64
	delta  bool
	// refAnswer: the push that ended, and what the client accepted of it
	// (nil when nothing: a NACK, the stream's end).
	push     *track.Push
	accepted *track.Lease
	// large: accepted is the hand-over held beyond the queue's bound.
	large bool
	// refRequest: the request, and whether it answers the latest push.
	req     *codec.Request
	answers bool
	// refLost: why the stream is no longer checked.
	why string
	at  time.Time
}

const (
	refOpen = iota
	refRequest
	refAnswer
	refClose
	refLost // something of the stream was not checked
	refTick
)

// unchecked says why a stream is no longer checked when a push or a request
// of it was lost.
const unchecked = "pushes or requests of the stream went unchecked (a full queue or skipped observation): its reference graph would be wrong"

var (
	_ track.Sink    = (*References)(nil)
	_ export.Output = (*References)(nil)
)

// Config shapes the check.
type Config struct {
	// Grace is DefaultGrace when 0.
	Grace time.Duration
	// OutputConfig.QueueBytes bounds the bytes of accepted pushes waiting
	// to be scanned, but for one larger than that.
	export.OutputConfig
	// Registry, when set, gets the metrics.
	Registry *prometheus.Registry
	// Spans, when set, gets a span per check that changed something.
	Spans Spans
}

// Spans records a check of a stream's references that changed something:
// tracing.Tracing does. p is the push whose answer made the change, nil
// for a request's or the clock's.
type Spans interface {
	References(stream uint64, ref *track.StreamRef, node string, p *track.Push, changes []refgraph.Change)
}

var mbbBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// New starts checking. Close stops it.
func New(cfg Config) *References {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	cfg.Logger = shared.Logger(cfg.Logger)
	_, human := cfg.Logger.Handler().(*export.Pretty)
	r := &References{grace: cfg.Grace, log: cfg.Logger, detail: !human, spans: cfg.Spans, streams: map[uint64]*refStream{},
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adstap_dangling_references",
			Help: "References that dangle now, in what proxies accepted: a route or TCP proxy to a cluster they do not have, a listener waiting for a route configuration, an EDS cluster without endpoints or with none healthy, a secret never received."}, []string{"kind"}),
		found: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "adstap_dangling_references_total",
			Help: "Dangling references found (see adstap_dangling_references)."}, []string{"kind"}),
		mbbWindow: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "adstap_make_before_break_seconds",
			Help:    "How long a proxy pointed at nothing when a control plane pushed a reference before its target within one push round (make-before-break broken).",
			Buckets: mbbBuckets}, []string{"kind"}),
	}
	for _, k := range refgraph.Kinds {
		r.open.WithLabelValues(string(k))
		r.found.WithLabelValues(string(k))
	}
	for _, k := range []refgraph.Kind{refgraph.RouteCluster, refgraph.ListenerCluster} {
		r.mbbWindow.WithLabelValues(string(k))
	}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(r.open, r.found, r.mbbWindow)
	}
	r.q = outq.NewBatched(export.ReferencesOutput, cfg.QueueBytes, r.do, outq.WarnLost(cfg.Logger, export.ReferencesOutput, "accepted pushes and requests (their streams are no longer checked)"),
		r.release, // a push dropped at Close's deadline is let go of
		outq.Batch{Linger: refLinger})
	return r
}

// refLinger is how long the check's goroutine gathers work once woken.
// Every ACK and request of a stream comes here, thousands a second on a tap
// in front of istiod, mostly one at a time: woken for each, the goroutine
// cost the tap a thread's wake-up a frame, which on a virtual machine costs
// more than the check itself. The check goes by the times the events carry,
// so doing them later changes none of its findings.
const refLinger = 10 * time.Millisecond

// Take registers the check with tr as a taker of the accepted pushes of
// the types the reference graph reads, and of those superseded before
// their answer, which the tracker assumes applied; call it before tr tracks
// a stream.
func (r *References) Take(tr *track.Tracker) {
	r.taker = tr.TakeAccepted(track.Takes{Types: refgraph.Reads, Superseded: true})
}

// Tick reports the references that have waited past the grace by now; call
// it about once a second (the pipeline's clock does), so they are noticed
// when no push is accepted.
func (r *References) Tick(now time.Time) { r.q.Put(refOp{kind: refTick, at: now}, 16, true) }

// OnEvent follows the streams, their requests and the tracker's verdicts on
// their pushes, and takes each accepted push the tracker hands over. It
// never waits.
func (r *References) OnEvent(e track.Event) {
	switch e := e.(type) {
	case track.StreamOpened:
		if e.Stream.Protocol != codec.Opaque {
			r.q.Put(refOp{kind: refOpen, stream: e.Stream.ID, delta: e.Stream.Protocol == codec.Delta}, 64, true)
		}
	case track.StreamClosed:
		r.q.Put(refOp{kind: refClose, stream: e.Stream.ID}, 64, true)
	case track.RequestSeen:
		if e.Request != nil {
			r.request(e)
		}
	case track.PushEnded:
		switch e.Result {
		case track.ResultTimeout:
			// Kept for a late answer.
		case track.ResultACK, track.ResultSuperseded:
			r.ended(e.Push, r.taker.Lease(e.Accepted), e.At)
		default:
			r.ended(e.Push, nil, e.At)
		}
	case track.LateAnswer:
		r.ended(e.Push, r.taker.Lease(e.Accepted), e.At)
	case track.ObservationGap:
		r.q.Put(refOp{kind: refLost, stream: e.StreamID, why: unchecked}, 64, true)
	}
}

// request queues what a request says of the client's subscription.
func (r *References) request(e track.RequestSeen) {
	req := e.Request
	size := 256
	for _, names := range [][]string{req.ResourceNames, req.Subscribe, req.Unsubscribe} {
		for _, n := range names {
			size += len(n) + 16
		}
	}
	if !r.q.Put(refOp{kind: refRequest, stream: e.StreamID, req: req, answers: e.Answers, at: e.At}, size, false) {
		r.q.Put(refOp{kind: refLost, stream: e.StreamID, why: unchecked}, 64, true)
	}
}

// ended queues the end of a push, with what the client accepted of it (a
// nil a: nothing). An accepted push that does not fit is let go of, and its
// stream is no longer checked.
func (r *References) ended(p *track.Push, l *track.Lease, at time.Time) {
	op := refOp{kind: refAnswer, stream: p.StreamID, push: p, at: at}
	a := l.Accepted()
	if a == nil || a.NotKept != "" {
		if a != nil {
			op.why = "the tracker did not keep a push the client accepted: " + a.NotKept
			l.Release()
		}
		r.q.Put(op, 256, true)
		return
	}
	op.accepted = l
	var queued bool
	if a.Bytes > r.q.MaxBytes() && r.large.CompareAndSwap(false, true) {
		// Larger than the whole queue: held beyond it, alone.
		op.large = true
		if queued = r.q.Put(op, 256, true); !queued {
			r.large.Store(false)
		}
	} else {
		queued = r.q.Put(op, int(a.Bytes)+256, false)
	}
	if !queued {
		l.Release()
		r.q.Put(refOp{kind: refLost, stream: p.StreamID, why: unchecked}, 64, true)
	}
}

// release lets go of what an op holds, done or dropped.
func (r *References) release(op refOp) {
	if op.accepted == nil {
		return
	}
	op.accepted.Release()
	if op.large {
		r.large.Store(false)
	}
}

// Name is the output's name, its queue's.
func (r *References) Name() string { return export.ReferencesOutput }

// Dropped counts what the check's queue dropped.
func (r *References) Dropped() uint64 { return r.q.Dropped() }

// Close stops checking, once what waits is done or ctx is done.
func (r *References) Close(ctx context.Context) error {
	return r.q.Close(ctx)
}

func (r *References) do(op refOp) {
	defer r.release(op)
	if op.kind == refTick {
		r.mu.Lock()
		for id, st := range r.streams {
			if st.off == "" {
				r.report(id, st, nil, st.graph.Tick(op.at))
			}
		}
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.streams[op.stream]
	switch op.kind {
	case refOpen:
		r.streams[op.stream] = &refStream{graph: refgraph.New(op.delta, r.grace)}
		return
	case refClose:
		if st != nil {
			r.forget(st)
			delete(r.streams, op.stream)
		}
		return
	}
	if st == nil || st.off != "" {
		return
	}
	switch op.kind {
	case refRequest:
		if st.answering.req != nil {
			r.requested(op.stream, st, st.answering)
		}
		if op.answers {
			st.answering = pendingRequest{op.req, op.at}
			return
		}
		r.requested(op.stream, st, pendingRequest{op.req, op.at})
	case refAnswer:
		if op.push.Node.ID != "" {
			st.node = op.push.Node.ID
		}
		if op.push.Ref != nil {
			st.ref = op.push.Ref
		}
		switch {
		case op.why != "":
			r.stop(op.stream, st, op.why)
			return
		case op.accepted != nil:
			a := op.accepted.Accepted()
			st.graph.ShareScans(r.sharedScans())
			changes := st.graph.Accepted(refgraph.Push{TypeURL: op.push.TypeURL, Resources: accepted{a},
				Removed: a.Removed, Replace: a.Replace}, op.at, op.push.Round)
			if len(changes) > 0 {
				r.report(op.stream, st, op.push, changes)
			}
		}
		if req := st.answering; req.req != nil {
			st.answering = pendingRequest{}
			r.requested(op.stream, st, req)
		}
	case refLost:
		r.stop(op.stream, st, op.why)
	}
}

// accepted are an accepted push's resources as the graph reads them, in
// place: gathered in a list of the graph's own, a push of 40,000 resources
// was 2 MB more at its peak.
type accepted struct{ a *track.Accepted }

func (v accepted) Len() int { return len(v.a.Resources) }

func (v accepted) Resource(i int) refgraph.Resource {
	r := &v.a.Resources[i]
	return refgraph.Resource{Name: r.Name, Body: r.Body, Unchanged: r.Unchanged, Hash: r.Hash}
}

// sharedScans are the scans the streams' graphs share, made when a second
// stream is checked and let go of when one is left. r.mu is held.
func (r *References) sharedScans() *refgraph.Scans {
	if len(r.streams) < 2 {
		if r.scans != nil {
			h, m := r.scans.Stats()
			r.sharedHits, r.sharedMisses = r.sharedHits+h, r.sharedMisses+m
		}
		r.scans = nil
	} else if r.scans == nil {
		r.scans = refgraph.NewScans()
	}
	return r.scans
}

// ScanStats returns how many resources the check found scanned already
// for another stream, and how many it scanned.
func (r *References) ScanStats() (shared, scanned uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	shared, scanned = r.sharedHits, r.sharedMisses
	if r.scans != nil {
		h, m := r.scans.Stats()
		shared, scanned = shared+h, scanned+m
	}
	return shared, scanned
}

// requested applies what a request says of the client's subscription.
// r.mu is held.
func (r *References) requested(id uint64, st *refStream, pr pendingRequest) {
	r.report(id, st, nil, st.graph.Requested(pr.req, pr.at, 0))
}

// stop stops checking a stream, for why. r.mu is held.
func (r *References) stop(id uint64, st *refStream, why string) {
	st.off, st.answering = why, pendingRequest{}
	r.log.Warn(fmt.Sprintf("stream %d: references no longer checked: %s", id, st.off), "stream", id)
	r.forget(st)
}

// forget takes a stream's findings out of the metrics. r.mu is held.
func (r *References) forget(st *refStream) {
	for _, f := range st.graph.Findings() {
		r.open.WithLabelValues(string(f.Kind)).Dec()
	}
	st.graph = refgraph.New(st.graph.Delta(), r.grace)
}

// report tells the outputs what a check started and ended. r.mu is held.
func (r *References) report(id uint64, st *refStream, p *track.Push, changes []refgraph.Change) {
	if len(changes) == 0 {
		return
	}
	for _, c := range changes {
		kind := string(c.Kind)
		if c.Resolved {
			r.open.WithLabelValues(kind).Dec()
			if c.MakeBeforeBreak {
				r.mbbWindow.WithLabelValues(kind).Observe(c.Window.Seconds())
			}
		} else {
			r.open.WithLabelValues(kind).Inc()
			r.found.WithLabelValues(kind).Inc()
		}
		r.logChange(id, st.node, c)
	}
	if r.spans != nil {
		r.spans.References(id, st.ref, st.node, p, changes)
	}
}

// logChange writes a finding's line, e.g.
//
//	dangling reference on stream 3: route reviews of virtual host … sends 10% of its traffic to cluster outbound|9080|v2|reviews.default.svc.cluster.local, which the proxy does not have: those requests fail with 503 NC — from VirtualService default/reviews-split node=sidecar~…
func (r *References) logChange(id uint64, node string, c refgraph.Change) {
	var msg string
	level := slog.LevelWarn
	switch {
	case c.Resolved && c.MakeBeforeBreak:
		msg = fmt.Sprintf("make-before-break broken on stream %d: for %s, within one push round: %s (the control plane pushed the reference before its target)%s",
			id, export.Latency(c.Window), c.ResolvedSummary(c.Present), shared.ObjectOf(c.Finding))
	case c.Resolved:
		level = slog.LevelInfo
		msg = fmt.Sprintf("dangling reference resolved on stream %d after %s: %s%s", id, c.Window.Round(time.Millisecond), c.ResolvedSummary(c.Present), shared.ObjectOf(c.Finding))
	default:
		msg = fmt.Sprintf("dangling reference on stream %d: %s%s", id, c.Summary(), shared.FixHint(c.Finding))
	}
	msg += shared.NodeSuffix(node)
	if !r.detail {
		r.log.Log(context.Background(), level, msg)
		return
	}
	facts := []any{"stream", id, "node", node, "kind", string(c.Kind), "owner_type", c.OwnerType, "owner", c.Owner,
		"target", c.Target, "share", c.Share(), "resolved", c.Resolved}
	if c.Route != "" || c.VirtualHost != "" {
		facts = append(facts, "route_configuration", c.RouteConfig, "virtual_host", c.VirtualHost, "route", c.Route)
	}
	if c.Config != "" {
		facts = append(facts, "istio_config", c.Config)
	}
	if c.Resolved {
		facts = append(facts, "duration_ms", shared.Ms(c.Window), "make_before_break", c.MakeBeforeBreak)
	}
	r.log.Log(context.Background(), level, msg, slog.Group(export.DetailGroup, facts...))
}

// Holds reports whether the reference graph of stream id holds a resource
// of typeURL named name: one the check takes its client to have accepted
// and not dropped since. What the tracker has judged by now is applied
// first (within a second), as for Dangling.
func (r *References) Holds(ctx context.Context, id uint64, typeURL, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	r.q.Flush(ctx)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.streams[id]
	return st != nil && st.off == "" && st.graph.Holds(typeURL, name)
}

// DanglingReference is a dangling reference as /debug/streams shows it
// (dangling_references).
type DanglingReference struct {
	Stream      uint64    `json:"stream"`
	NodeID      string    `json:"node_id"`
	Kind        string    `json:"kind"`
	OwnerType   string    `json:"owner_type"`
	Owner       string    `json:"owner"`
	RouteConfig string    `json:"route_configuration,omitempty"`
	VirtualHost string    `json:"virtual_host,omitempty"`
	Route       string    `json:"route,omitempty"`
	Target      string    `json:"target"`
	Share       float64   `json:"share"`
	Endpoints   int       `json:"endpoints,omitempty"`
	IstioConfig *IstioRef `json:"istio_config,omitempty"`
	Since       time.Time `json:"since"`
	// Summary is the live log's sentence, with the object to fix.
	Summary string `json:"summary"`
}

// IstioRef is an Istio object as the pages name it.
type IstioRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Path      string `json:"path"`
	Kubectl   string `json:"kubectl"`
}

// Dangling returns the dangling references reported now, of every stream or
// of one node's, by stream. What the tracker has judged by now is applied
// first (within a second), so the page agrees with the streams it shows.
func (r *References) Dangling(ctx context.Context, node string) []DanglingReference {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	r.q.Flush(ctx)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []DanglingReference{}
	for id, st := range r.streams {
		if node != "" && st.node != node {
			continue
		}
		for _, f := range st.graph.Findings() {
			d := DanglingReference{Stream: id, NodeID: st.node, Kind: string(f.Kind), OwnerType: f.OwnerType, Owner: f.Owner,
				RouteConfig: f.RouteConfig, VirtualHost: f.VirtualHost, Route: f.Route, Target: f.Target, Share: f.Share(),
				Endpoints: f.Endpoints, Since: f.Since, Summary: f.Summary() + shared.FixHint(f)}
			if o, ok := origin.ParsePath(f.Config); ok {
				d.IstioConfig = &IstioRef{Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Path: o.Path, Kubectl: o.Kubectl()}
			}
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b DanglingReference) int {
		if a.Stream != b.Stream {
			return int(a.Stream) - int(b.Stream)
		}
		return strings.Compare(a.Summary, b.Summary)
	})
	return out
}
