package track

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/codec"
)

// Tracker follows the protocol state of every stream of a tap. It is pure
// logic: no goroutines, no I/O, no clock of its own (every call says what
// time it is), so a sequence of calls always gives the same events.
//
// It is safe for concurrent use. Calls for one stream must come in the order
// the frames crossed the tap; calls for different streams may run at once,
// and do: each stream has a lock of its own, so one stream's diff never
// waits for another's, and the once-a-second sweep (Tick) takes one stream
// at a time. Only the detectors that span streams share a lock, held for
// the few moments an episode starts or ends.
//
// The returned events are the caller's, but slices inside them (name lists)
// may be shared between events and must not be modified.
type Tracker struct {
	cfg     Config
	streams sync.Map // stream id → *stream
	det     detectors
	keep    keeper
}

// New returns a Tracker; zero fields of cfg take their defaults.
func New(cfg Config) *Tracker {
	t := &Tracker{cfg: cfg.withDefaults()}
	t.keep.limit = t.cfg.KeepBytes
	t.det = newDetectors(&t.cfg)
	return t
}

// TakeAccepted registers a taker of the accepted pushes that takes
// selects: from then on the tracker keeps the views of each push of those
// types until its answer, and an ACK (or, with takes.Superseded, a newer
// push superseding it) hands it over as PushEnded.Accepted or
// LateAnswer.Accepted, which the taker leases (Taker.Lease). Call it
// before any stream is tracked: a type's takers are fixed when its first
// push is seen. It panics past 64 takers.
func (t *Tracker) TakeAccepted(takes Takes) *Taker {
	k := &t.keep
	if len(k.takers) == maxTakers {
		panic("track: too many takers of accepted pushes")
	}
	tk := &Taker{bit: 1 << len(k.takers), takes: takes}
	k.takers = append(k.takers, takes)
	return tk
}

// TakeChanged makes a push that ends with an ACK, superseded or with its
// stream hand what it kept to its PushEnded (Changed) rather than let go of
// it, for the one output that reads the Istio objects the resources it
// changed came from (tracing), which releases each Changed. Call it before
// any stream is tracked, and once: a Changed has one reader to release it,
// and a second taker would read bytes the first let go of.
func (t *Tracker) TakeChanged() {
	if t.keep.handsOver {
		panic("track: TakeChanged called twice: one output takes the changed pushes")
	}
	t.keep.handsOver = true
}

// lock returns stream id locked, with scratch space to work in (unlock
// gives both back); nil when the stream is not tracked.
func (t *Tracker) lock(id uint64) *stream {
	v, ok := t.streams.Load(id)
	if !ok {
		return nil
	}
	s := v.(*stream)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.sc.borrow()
	return s
}

// lockTracked is lock for a frame to track: nil for a frame that says
// nothing (has is false) or a stream whose frames are not tracked (opaque).
func (t *Tracker) lockTracked(id uint64, has bool) *stream {
	if !has {
		return nil
	}
	s := t.lock(id)
	if s != nil && s.meta.Protocol == codec.Opaque {
		s.unlock()
		return nil
	}
	return s
}

func (s *stream) unlock() {
	s.sc.giveBack()
	s.mu.Unlock()
}

// sortedStreams returns the tracked streams in id order.
func (t *Tracker) sortedStreams() []*stream {
	var out []*stream
	t.streams.Range(func(_, v any) bool {
		out = append(out, v.(*stream))
		return true
	})
	slices.SortFunc(out, func(a, b *stream) int { return cmp.Compare(a.meta.ID, b.meta.ID) })
	return out
}

// OpenStream starts tracking a stream. A zero m.Protocol is derived from
// m.Method.
func (t *Tracker) OpenStream(m StreamMeta) []Event {
	if m.Protocol == "" {
		m.Protocol = codec.ProtocolOf(m.Method)
	}
	var evs []Event
	if old := t.lock(m.ID); old != nil {
		// An id is never reused by the tap; if it were, the old stream's
		// episodes must not stay active forever.
		evs = t.closeStream(old, m.OpenedAt, 0, "replaced by a stream with the same id", evs)
		old.unlock()
	}
	s := newStream(m, &t.keep)
	t.streams.Store(m.ID, s)
	evs = append(evs, StreamOpened{Stream: m, Ref: s.ref})
	return t.det.opened(m.OpenedAt, evs)
}

// Request tracks a request of a stream. size is the frame's size on the wire.
// req is handed to the outputs (RequestSeen.Request): the caller does not
// change it once Request returns.
func (t *Tracker) Request(streamID uint64, at time.Time, req *codec.Request, size int) []Event {
	return t.AppendRequest(nil, streamID, at, req, size)
}

// AppendRequest is Request appending the events to evs, a buffer the
// caller reuses once it has handed them on: a small push and its ACK
// grew a slice of events three times.
func (t *Tracker) AppendRequest(evs []Event, streamID uint64, at time.Time, req *codec.Request, size int) []Event {
	s := t.lockTracked(streamID, req != nil)
	if s == nil {
		return evs
	}
	defer s.unlock()
	evs = s.settle(at, t.cfg.FullSyncSettle, false, evs)
	s.setNode(req.Node)
	ts := s.typeFor(req.TypeURL)
	if ts == nil {
		return evs
	}
	c := ts.classify(req, s.sc)
	rt := ts.resources(&t.cfg)
	if rt != nil && (c.changed || c.newType || req.InitialVersions != nil) {
		evs = rt.subscribed(ts, s, req, at, t.cfg.MaxResources, evs)
	}
	// A request the server answers: the first of its type on the stream
	// whatever its nonce (istio's adsc puts a made-up one in its first
	// requests), a request without a nonce, or a subscription change with
	// the latest nonce. istiod and go-control-plane ignore a request with a
	// stale nonce, its subscription change included.
	if c.newType || c.kind == KindInitial || c.kind == KindSubscription || (c.changed && c.kind != KindStale) {
		ts.ask.ask(c.kind != KindUnsubscribe, &s.round.pushRound)
	}
	evs = append(evs, RequestSeen{
		StreamID: streamID, Ref: s.ref, Node: s.node, TypeURL: ts.url, Kind: c.kind,
		SubscriptionChanged: c.changed, Answers: c.answers, Nonce: req.ResponseNonce, At: at, Request: req,
	})
	if c.answers {
		if rt != nil {
			evs = rt.answered(ts, s, req.ErrorDetail, at, t.cfg.MaxResources, evs)
		}
		evs = ts.answer(s, at, req, t.cfg.MaxNames, evs)
		evs = t.det.answered(&ts.det, ts.p, s.node.ID, at, req.ErrorDetail != nil, evs)
		ts.acked.reshare()
		if rt != nil {
			rt.reshare()
		}
	} else {
		evs = t.det.checkStorm(&ts.det, at, evs)
	}
	s.requested(at, ts, c.newType)
	return evs
}

// Response tracks a response (a push) of a stream. resp may be reused by the
// caller once Response returns: nothing of it is kept without copying.
func (t *Tracker) Response(streamID uint64, at time.Time, resp *codec.Response, size int) []Event {
	return t.ResponseFrame(streamID, at, resp, size, nil)
}

// ResponseFrame is Response with the response's bytes (those resp was
// decoded from). Until the push is answered, superseded or its stream ends,
// within Config.KeepBytes, the tracker keeps what a NACK needs to name what
// it rejected (PushEnded.Rejected): a copy of the resources the push added
// or changed when they are a small part of it, and data may be reused once
// ResponseFrame returns; otherwise a reference to data (data.Ref). When a
// taker takes the type's accepted pushes (TakeAccepted) it keeps the views
// of resp's resources too, for the push's Accepted, and resp then lets go
// of the copies they point into (codec.Response.KeepViews).
func (t *Tracker) ResponseFrame(streamID uint64, at time.Time, resp *codec.Response, size int, data mem.BufferSlice) []Event {
	return t.AppendResponseFrame(nil, streamID, at, resp, size, data)
}

// AppendResponseFrame is ResponseFrame appending the events to evs, as
// AppendRequest.
func (t *Tracker) AppendResponseFrame(evs []Event, streamID uint64, at time.Time, resp *codec.Response, size int, data mem.BufferSlice) []Event {
	s := t.lockTracked(streamID, resp != nil)
	if s == nil {
		return evs
	}
	defer s.unlock()
	evs = s.settle(at, t.cfg.FullSyncSettle, false, evs)
	if resp.ControlPlane != "" {
		s.controlPlane = resp.ControlPlane
	}
	ts := s.typeFor(resp.TypeURL)
	if ts == nil {
		return evs
	}
	s.lastPushType = ts.url
	rt := ts.resources(&t.cfg)
	if rt != nil && ts.sent.pending() {
		evs = rt.answered(ts, s, nil, at, t.cfg.MaxResources, evs) // superseded: assumed applied
	}
	evs, full := ts.send(s, at, resp, size, &t.cfg, evs)
	if rt != nil {
		rt.pushed(resp)
	}
	ts.hold(s, resp, data)
	return t.det.pushed(&ts.det, ts.p, s.node.ID, at, full, evs)
}

// CloseStream ends tracking of a stream: its open pushes end as closed, its
// episodes end, and its state is dropped. code and message are the gRPC
// status the client got.
func (t *Tracker) CloseStream(streamID uint64, at time.Time, code uint32, message string) []Event {
	s := t.lock(streamID)
	if s == nil {
		return nil
	}
	defer s.unlock()
	return t.closeStream(s, at, code, message, nil)
}

// closeStream ends s, which the caller holds locked.
func (t *Tracker) closeStream(s *stream, at time.Time, code uint32, message string, evs []Event) []Event {
	evs = s.settle(at, t.cfg.FullSyncSettle, true, evs)
	for _, ts := range s.order {
		evs = ts.closePush(s.keep, at, evs)
		ts.nack.closed(s.keep, ts.p)
	}
	for _, ts := range s.order {
		evs = t.det.closed(&ts.det, at, evs)
	}
	s.closed = true
	t.streams.CompareAndDelete(s.meta.ID, s)
	return append(evs, StreamClosed{Stream: s.meta, Ref: s.ref, Node: s.node, At: at, Code: code, Message: message})
}

// Gap tells the tracker that skipped frames of a stream were relayed but
// never observed (the observation queue was full). Until a type's next push
// is observed, a request with a nonce the tracker does not know is reported
// as KindUnobserved rather than stale.
func (t *Tracker) Gap(streamID uint64, at time.Time, skipped int) []Event {
	e := ObservationGap{StreamID: streamID, Skipped: skipped, At: at}
	if s := t.lock(streamID); s != nil {
		for _, ts := range s.order {
			ts.out.unsure = true
		}
		s.unsure = true
		e.Ref = s.ref
		s.unlock()
	}
	return []Event{e}
}

// DecodeFailed reports a frame that could not be decoded. The stream's state
// is left as it was: the frame was relayed, but what it meant is unknown.
func (t *Tracker) DecodeFailed(streamID uint64, at time.Time, direction codec.Direction, err error) []Event {
	e := DecodeError{StreamID: streamID, Direction: direction, Err: err, At: at}
	if s := t.lock(streamID); s != nil {
		e.Ref, e.TypeURL = s.ref, s.lastPushType
		s.unlock()
	}
	return []Event{e}
}

// Tick runs the rules that depend on time passing rather than on frames:
// push timeouts, the settling of time to full sync, and the end of
// episodes. Call it about once a second. It visits one stream at a time,
// each locked only while it is looked at: frames of the others go on.
func (t *Tracker) Tick(now time.Time) []Event {
	var evs []Event
	for _, s := range t.sortedStreams() {
		s.mu.Lock()
		if !s.closed {
			s.sc.borrow()
			evs = s.settle(now, t.cfg.FullSyncSettle, false, evs)
			for _, ts := range s.order {
				evs = ts.expire(now, t.cfg.PushTimeout, evs)
				if ts.res != nil {
					evs = ts.res.expire(ts, s, now, t.cfg.InitialFetchTimeout, evs)
				}
				evs = t.det.checkStorm(&ts.det, now, evs)
				ts.acked.share()
				ts.sub.share()
				if ts.res != nil {
					ts.res.share()
				}
			}
			s.sc.giveBack()
		}
		s.mu.Unlock()
	}
	return t.det.tick(now, evs)
}
