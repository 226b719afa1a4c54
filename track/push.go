package track

import (
	"time"

	"github.com/adstap/adstap/codec"
)

// send makes resp the type's latest push. A previous push still waiting for
// its answer ends superseded; its changes are assumed applied, because the
// client handles every response in order and its answer is merely late (and
// will carry a stale nonce). Without that, a Delta push following an
// unanswered one would be diffed against a state that misses the first.
//
// It also places the push in its push round (round.go), and reports whether
// the push made that round a new full push.
func (ts *typeState) send(s *stream, at time.Time, resp *codec.Response, size int, cfg *Config, evs []Event) ([]Event, bool) {
	p := ts.p
	ts.out.unsure = false // the nonces that matter from now on are this push's and later ones
	if ts.sent.state == pushOpen {
		e := PushEnded{Push: p.sent, Result: ResultSuperseded, At: at, Latency: at.Sub(p.ev.SentAt)}
		if ts.supersedeTakers != 0 {
			e.Changed, e.Accepted = s.keep.accept(&p.held, p, true, ts.supersedeTakers)
		} else {
			e.Changed = s.keep.handOver(&p.held, p.delta)
		}
		evs = append(evs, e)
		ts.out.end(ResultSuperseded, at.Sub(p.ev.SentAt), "")
	}
	if ts.sent.pending() {
		ts.acked.apply(p, &ts.sub, s.sc)
	}
	p = ts.takePush()
	content := contentOf(resp)
	replace := codec.Replaces(resp.Delta, ts.url, ts.sub.wildcard, ts.sub.requested)
	// A control plane re-sending the same content against the same state
	// (a NACK loop) gets the previous diff: it would come out the same.
	same := p.loaded && p.content == content && p.gen == ts.acked.gen &&
		p.delta == resp.Delta && p.replace == replace &&
		len(p.res) == len(resp.Resources) && len(p.removed) == len(resp.RemovedResources)
	if !same {
		ts.acked.load(p, &ts.sub, resp)
		p.loaded, p.content, p.gen, p.delta, p.replace = true, content, ts.acked.gen, resp.Delta, replace
		p.ev.Diff, p.ev.FullSync = ts.acked.diff(p, &ts.sub, s.sc, cfg.MaxNames)
		p.ev.Redundant = ts.acked.baseline && p.ev.Diff.Added == 0 && p.ev.Diff.Removed == 0 && p.ev.Diff.Changed == 0
	}
	p.ev.StreamID = s.meta.ID
	p.ev.Ref = s.ref
	p.ev.Node = s.node
	p.ev.TypeURL = ts.url
	p.ev.Type = ts.short
	p.ev.Version = resp.VersionInfo
	p.ev.Nonce = resp.Nonce
	p.ev.Replace = replace
	p.ev.Resources = len(resp.Resources)
	p.ev.Bytes = size
	p.ev.SentAt = at
	p.ev.Initial = p.ev.FullSync && !ts.out.fullSynced
	p.ev.Content = content
	ts.sent = sentPush{state: pushOpen, version: resp.VersionInfo, nonce: resp.Nonce, at: at}
	p.ev.First = s.recent == nil
	if s.recent == nil {
		s.recent = new(pushRing)
	}
	ts.out.record(s.recent, &p.ev)
	full := s.round.join(&ts.ask, &p.ev, at, resp.VersionInfo)

	ts.out.sent(&p.ev)
	// One copy for the push's events and every output that keeps them:
	// p.ev is rewritten by the type's next push, and an event boxed by
	// value would copy all of it again for each event.
	p.sent = new(Push)
	*p.sent = p.ev
	evs = append(evs, PushSent{Push: p.sent})
	if full {
		evs = append(evs, FullPush{StreamID: s.meta.ID, Ref: s.ref, Node: s.node, Version: resp.VersionInfo, Round: p.ev.Round, TypeURL: ts.url, At: at, Count: s.round.fullPushes})
	}
	return evs, full
}

// answer ends the latest push with the client's verdict, on stream s. A
// push that had timed out gets a LateAnswer instead of a second PushEnded.
func (ts *typeState) answer(s *stream, at time.Time, req *codec.Request, maxNames int, evs []Event) []Event {
	p := ts.p
	result := ResultACK
	if req.ErrorDetail != nil {
		result = ResultNACK
	}
	latency := at.Sub(p.ev.SentAt)
	var names []string
	var rejected *Rejected
	if result == ResultNACK {
		names = ts.nack.errorNames(p, req.ErrorDetail.Message, maxNames)
		rejected = ts.nack.rejected(s.keep, p, req.ErrorDetail.Message, names)
	}
	if ts.sent.state == pushTimedOut {
		e := LateAnswer{Push: p.sent, Result: result, At: at, Latency: latency, Rejected: rejected}
		if result == ResultACK {
			_, e.Accepted = s.keep.accept(&p.held, p, false, ts.acceptTakers)
		}
		evs = append(evs, e)
	} else {
		e := PushEnded{Push: p.sent, Result: result, At: at, Latency: latency}
		if result == ResultACK {
			e.Changed, e.Accepted = s.keep.accept(&p.held, p, true, ts.acceptTakers)
		}
		if result == ResultNACK {
			e.ErrorCode = req.ErrorDetail.Code
			e.Error = req.ErrorDetail.Message
			e.ErrorNames = names
			e.Rejected = rejected
		}
		evs = append(evs, e)
	}
	ts.sent.state = pushAnswered
	if result == ResultACK {
		ts.out.end(result, latency, "")
		ts.nack.accepted(s.keep, p)
		ts.acked.apply(p, &ts.sub, s.sc)
		p.dropApplied()
		ts.out.acked(&p.ev, at)
		ts.letGoOfPush()
		return evs
	}
	ts.out.end(result, latency, req.ErrorDetail.Message)
	ts.out.nackedWith(req.ErrorDetail.Message, at)
	return evs
}

// expire ends a push that has waited too long. It stays the latest push, so
// the type reads STALE until an answer or a newer push.
func (ts *typeState) expire(now time.Time, timeout time.Duration, evs []Event) []Event {
	if ts.sent.state != pushOpen || now.Sub(ts.sent.at) < timeout {
		return evs
	}
	p := ts.p
	ts.sent.state = pushTimedOut
	ts.out.end(ResultTimeout, now.Sub(p.ev.SentAt), "")
	return append(evs, PushEnded{Push: p.sent, Result: ResultTimeout, At: now, Latency: now.Sub(p.ev.SentAt)})
}

// closePush ends a push the stream's end left unanswered, k being the
// tracker's keeper.
func (ts *typeState) closePush(k *keeper, at time.Time, evs []Event) []Event {
	if ts.sent.state != pushOpen {
		return evs
	}
	p := ts.p
	ts.sent.state = pushAnswered
	ts.out.end(ResultClosed, at.Sub(p.ev.SentAt), "")
	return append(evs, PushEnded{Push: p.sent, Result: ResultClosed, At: at, Latency: at.Sub(p.ev.SentAt),
		Changed: k.handOver(&p.held, p.delta)})
}

// takePush returns the type's push to fill with a new response: the latest,
// or one from the pool.
func (ts *typeState) takePush() *push {
	if ts.p == nil {
		ts.p = pushPool.Get().(*push)
	}
	return ts.p
}

// letGoOfPush gives the latest push back to the pool once its ACK applied
// it (dropApplied), unless it keeps a large push's slice, which the next
// push reuses.
func (ts *typeState) letGoOfPush() {
	p := ts.p
	if p == nil || p.res != nil {
		return
	}
	*p = push{}
	pushPool.Put(p)
	ts.p = nil
}
