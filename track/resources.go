package track

import (
	"strconv"
	"strings"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/canon"
)

// resources returns the type's table, made on first need; nil unless
// Config.Resources.
func (ts *typeState) resources(cfg *Config) *resTable {
	if !cfg.Resources || !tracksResources(ts.url) {
		return nil
	}
	if ts.res == nil {
		ts.res = new(resTable)
	}
	return ts.res
}

// remove drops entry k, moving the last into its place as names does.
func (t *resTable) remove(ts *typeState, s *stream, k int, at time.Time, evs []Event) []Event {
	evs = t.clearNotSent(ts, s, k, at, false, evs)
	t.set(k, ClientUnknown, 0)
	t.setFail(k, nil)
	t.stamp(k, name{}, 0)
	last := len(t.ents) - 1
	t.names.removeAt(k)
	t.ents[k] = t.ents[last]
	t.ents[last] = resEntry{}
	t.ents = t.ents[:last]
	return evs
}

// subscribed follows a request that changed the type's subscription (its
// first included): what the client holds already (Delta
// initial_resource_versions), what it asks for now (REQUESTED until
// answered), and what it no longer wants (dropped, as the client drops it).
func (t *resTable) subscribed(ts *typeState, s *stream, req *codec.Request, at time.Time, max int, evs []Event) []Event {
	t.own()
	now := at.UnixNano()
	for n, v := range req.InitialVersions {
		if n == "*" || t.names.findString(n, -1) >= 0 {
			continue
		}
		if k := t.add(canon.Make(n), ClientACKed, now, max); k >= 0 {
			t.stamp(k, canon.Make(v), now)
		}
	}
	var c cursor
	for k := len(t.ents) - 1; k >= 0; k-- {
		n := t.names.names[k]
		kept := ts.sub.findName(n, c.guess())
		c.found(kept)
		if kept >= 0 {
			continue
		}
		if st := t.ents[k].status; ts.sub.wildcard && st != ClientRequested && st != ClientDoesNotExist {
			continue // received under the wildcard
		}
		evs = t.remove(ts, s, k, at, evs)
	}
	c = cursor{}
	t.room(len(ts.sub.names)-len(t.ents), max)
	for _, n := range ts.sub.names {
		k := t.names.findName(n, c.guess())
		c.found(k)
		if k < 0 {
			t.add(n, ClientRequested, now, max)
		}
	}
	t.names.idle()
	return evs
}

// answered applies the latest push as its client's answer says: everything
// it carried accepted, but what a NACK's message says it rejected. A
// superseded push (nack false) counts as accepted, as the tracker assumes.
// It runs before the tracker applies the push to its own state.
func (t *resTable) answered(ts *typeState, s *stream, nack *codec.ErrorDetail, at time.Time, max int, evs []Event) []Event {
	t.own()
	p := ts.p
	sent := p.ev.SentAt.UnixNano()
	pushVersion := canon.Make(p.ev.Version)
	var rejected map[string]string
	if nack != nil {
		rejected = rejectedNames(p, nack.Message)
	}
	n0 := len(t.ents)
	var seen []int32
	if p.replace {
		seen = s.sc.marksFor(n0)
	}
	if ts.sub.wildcard {
		t.room(len(p.res)-len(t.ents), max)
	}
	var c cursor
	for i := range p.res {
		r := &p.res[i]
		k := t.names.findName(r.name, c.guess())
		c.found(k)
		if k < 0 {
			if !ts.sub.wildcard || r.heartbeat {
				continue // not asked for: the client ignores it
			}
			if k = t.add(r.name, ClientUnknown, sent, max); k < 0 {
				continue
			}
		}
		if k < n0 && seen != nil {
			seen[k] = 1
		}
		if r.heartbeat {
			continue
		}
		v := pushVersion
		if i < len(t.versions) && t.versions[i] != (name{}) {
			v = t.versions[i]
		}
		e := &t.ents[k]
		if msg, ok := rejected[r.name.Value()]; ok {
			t.setFail(k, &resFailure{version: v.Value(), message: msg, at: sent})
			if e.status == ClientRequested || e.status == ClientDoesNotExist {
				t.stamp(k, t.stampOf(k).version, sent)
			}
			t.set(k, ClientNACKed, sent)
			evs = t.clearNotSent(ts, s, k, at, true, evs)
			continue
		}
		t.stamp(k, v, sent)
		t.setFail(k, nil)
		t.set(k, ClientACKed, sent)
		evs = t.clearNotSent(ts, s, k, at, true, evs)
	}
	if seen != nil {
		// A response that lists the whole type: what it lacks is gone.
		for k := n0 - 1; k >= 0; k-- {
			if seen[k] != 0 || !t.received(k) {
				continue
			}
			evs = t.gone(ts, s, k, sent, at, evs)
		}
	}
	for _, n := range p.removed {
		if k := t.names.findString(n, -1); k >= 0 {
			evs = t.gone(ts, s, k, sent, at, evs)
		}
	}
	for _, re := range t.errs {
		k := t.names.findString(re.Name, -1)
		if k < 0 {
			if !ts.sub.wildcard {
				continue
			}
			if k = t.add(canon.Make(re.Name), ClientUnknown, sent, max); k < 0 {
				continue
			}
		}
		t.setFail(k, &resFailure{version: p.ev.Version, message: re.Error.Message, at: sent})
		t.set(k, ClientReceivedErr, sent)
	}
	clear(t.versions)
	t.versions, t.errs = t.versions[:0], t.errs[:0]
	t.names.idle()
	return evs
}

// gone applies the control plane's removal of entry k: a resource the
// client still asks for by name does not exist, at once; one it had only
// under the wildcard leaves it.
func (t *resTable) gone(ts *typeState, s *stream, k int, sent int64, at time.Time, evs []Event) []Event {
	if ts.sub.findName(t.names.names[k], -1) < 0 {
		return t.remove(ts, s, k, at, evs)
	}
	t.setFail(k, nil)
	t.stamp(k, name{}, sent)
	t.set(k, ClientDoesNotExist, sent)
	return t.reportNotSent(ts, s, k, at, true, evs)
}

// expire finds the resources asked for longer than timeout ago with no
// answer: the client has them as DOES_NOT_EXIST now (gRPC's xDS client
// does; Envoy, with an initial_fetch_timeout of 0 as Istio sets for EDS,
// waits on), and each is a finding.
func (t *resTable) expire(ts *typeState, s *stream, now time.Time, timeout time.Duration, evs []Event) []Event {
	if t.requested == 0 || now.UnixNano()-t.oldest < int64(timeout) {
		return evs
	}
	t.own()
	oldest := int64(0)
	for k := range t.ents {
		if t.ents[k].status != ClientRequested {
			continue
		}
		since := t.stampOf(k).at
		if now.UnixNano()-since < int64(timeout) {
			if oldest == 0 || since < oldest {
				oldest = since
			}
			continue
		}
		t.set(k, ClientDoesNotExist, since)
		evs = t.reportNotSent(ts, s, k, now, false, evs)
	}
	t.oldest = oldest
	return evs
}

func (t *resTable) reportNotSent(ts *typeState, s *stream, k int, at time.Time, removed bool, evs []Event) []Event {
	e := &t.ents[k]
	if e.notSent {
		return evs
	}
	e.notSent = true
	t.notSent++
	return append(evs, ResourceNotSent{StreamID: s.meta.ID, Ref: s.ref, Node: s.node, TypeURL: ts.url,
		Name: t.names.names[k].Value(), Since: time.Unix(0, t.stampOf(k).at), At: at, Removed: removed})
}

func (t *resTable) clearNotSent(ts *typeState, s *stream, k int, at time.Time, arrived bool, evs []Event) []Event {
	e := &t.ents[k]
	if !e.notSent {
		return evs
	}
	e.notSent = false
	t.notSent--
	return append(evs, ResourceNotSentEnded{StreamID: s.meta.ID, Ref: s.ref, Node: s.node, TypeURL: ts.url,
		Name: t.names.names[k].Value(), At: at, Arrived: arrived})
}

// rejectedNames says which resources of push p a NACK's message rejects,
// each with what the message says of it. gRPC's xDS client writes
// `resource "NAME": why` for each, joined by ";\n"; otherwise each pushed
// resource the message names is rejected with the whole message, and a
// message that names none rejects the whole push.
func rejectedNames(p *push, message string) map[string]string {
	out := map[string]string{}
	for part := range strings.SplitSeq(message, ";\n") {
		i := strings.Index(part, `resource "`)
		if i < 0 {
			continue
		}
		rest := part[i+len(`resource `):]
		q, err := strconv.QuotedPrefix(rest)
		if err != nil || !strings.HasPrefix(rest[len(q):], ": ") {
			continue
		}
		if n, err := strconv.Unquote(q); err == nil {
			out[n] = rest[len(q)+2:]
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range p.res {
		if n := p.res[i].name.Value(); n != "" && strings.Contains(message, n) {
			out[n] = message
		}
	}
	if len(out) > 0 {
		return out
	}
	for i := range p.res {
		out[p.res[i].name.Value()] = message
	}
	return out
}

// ResourceNotSent is a resource a client asks for by name and does not
// have: nothing answered it within Config.InitialFetchTimeout of being asked
// for, or (Removed) the control plane removed it while it was still asked
// for. Reported once, until ResourceNotSentEnded.
type ResourceNotSent struct {
	StreamID uint64
	Ref      *StreamRef
	Node     Node
	TypeURL  string
	Name     string
	// Since is when the client asked for it (when it was removed, for Removed).
	Since   time.Time
	At      time.Time
	Removed bool
}

// ResourceNotSentEnded ends a ResourceNotSent: the resource arrived
// (Arrived), or the client no longer asks for it.
type ResourceNotSentEnded struct {
	StreamID uint64
	Ref      *StreamRef
	Node     Node
	TypeURL  string
	Name     string
	At       time.Time
	Arrived  bool
}

func (ResourceNotSent) event()      {}
func (ResourceNotSentEnded) event() {}

func (e ResourceNotSent) streamRef() *StreamRef      { return e.Ref }
func (e ResourceNotSentEnded) streamRef() *StreamRef { return e.Ref }
