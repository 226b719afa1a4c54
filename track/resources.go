package track

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unique"

	"github.com/adstap/adstap/codec"
)

// ClientStatus is a resource's status at its client, in CSDS's words
// (envoy.admin.v3.ClientResourceStatus, whose numbers these are).
type ClientStatus uint8

const (
	ClientUnknown      ClientStatus = 0
	ClientRequested    ClientStatus = 1 // asked for, no answer yet
	ClientDoesNotExist ClientStatus = 2 // asked for, and the control plane said (or by its silence showed) there is none
	ClientACKed        ClientStatus = 3
	ClientNACKed       ClientStatus = 4 // the latest version sent was rejected; Version is the one still in use
	ClientReceivedErr  ClientStatus = 5 // the control plane sent an error for it (resource_errors)
)

// ClientStatuses lists the statuses, for the words outputs derive from them.
var ClientStatuses = []ClientStatus{ClientUnknown, ClientRequested, ClientDoesNotExist, ClientACKed, ClientNACKed, ClientReceivedErr}

var clientStatusNames = [...]string{"UNKNOWN", "REQUESTED", "DOES_NOT_EXIST", "ACKED", "NACKED", "RECEIVED_ERROR"}

// String is CSDS's name of the status.
func (s ClientStatus) String() string {
	if int(s) < len(clientStatusNames) {
		return clientStatusNames[s]
	}
	return "ClientStatus(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText writes the status by its name.
func (s ClientStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a status by its name.
func (s *ClientStatus) UnmarshalText(b []byte) error {
	for i, n := range clientStatusNames {
		if n == string(b) {
			*s = ClientStatus(i)
			return nil
		}
	}
	return fmt.Errorf("unknown client status %q", b)
}

// Problem reports whether the status needs someone's attention.
func (s ClientStatus) Problem() bool {
	return s == ClientDoesNotExist || s == ClientNACKed || s == ClientReceivedErr
}

// resEntry is one resource of a type on a stream, at the position of its
// name in resTable.names. It is 24 bytes: a stream of 10,000 clusters holds
// them in one slice, its names shared tap-wide.
type resEntry struct {
	// version is the accepted version (the zero handle for none).
	version name
	// at is, in Unix nanoseconds, when the accepted version arrived, or,
	// REQUESTED and DOES_NOT_EXIST, since when the resource was asked for.
	at     int64
	status ClientStatus
	// failed says resTable.fails holds the latest rejection or
	// control-plane error of the resource, until it is accepted again.
	failed bool
	// notSent is set once the resource was reported ResourceNotSent, until
	// ResourceNotSentEnded.
	notSent bool
}

type resFailure struct {
	version, message string
	at               int64
}

// resTable is what a stream's client holds of one type, resource by
// resource: with Config.Resources, each subscribed or received resource, its
// client status, its accepted version and when, its latest rejection, and
// since when it waits. It is updated when a request changes the
// subscription and when the client answers a push (or a newer push
// supersedes it), never per byte of a push: what the push carried is the
// tracker's push (typeState.p) until then.
type resTable struct {
	names nameSet
	ents  []resEntry
	// fails are the failures of the entries that have one (resEntry.failed).
	fails map[name]resFailure
	// requested counts the entries in ClientRequested, the oldest of which
	// was asked for at oldest or later: the sweep looks at the entries only
	// when one may have waited too long.
	requested int
	oldest    int64
	notSent   int // entries reported ResourceNotSent
	dropped   int // names not tracked, past Config.MaxResources
	// versions are the latest push's resources' own versions (Delta), at
	// the positions of the push's resources, while it awaits its answer;
	// errs are its resource_errors.
	versions []name
	errs     []codec.ResourceError
}

// tracksResources reports whether a type's resources are followed one by
// one: not the questions istioctl and istio-agent ask on a stream.
func tracksResources(url string) bool {
	return url != codec.TypeSyncz && url != codec.TypeHealthInfo
}

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

// add appends an entry for n, which the table lacks; -1 past the bound.
func (t *resTable) add(n name, status ClientStatus, at int64, max int) int {
	if len(t.ents) >= max {
		t.dropped++
		return -1
	}
	t.names.add(n)
	t.ents = append(t.ents, resEntry{status: status, at: at})
	if status == ClientRequested {
		t.countRequested(at)
	}
	return len(t.ents) - 1
}

func (t *resTable) countRequested(at int64) {
	if t.requested == 0 || at < t.oldest {
		t.oldest = at
	}
	t.requested++
}

// set gives entry k a status, keeping the counts.
func (t *resTable) set(k int, status ClientStatus, at int64) {
	e := &t.ents[k]
	if e.status == ClientRequested {
		t.requested--
	}
	if status == ClientRequested {
		t.countRequested(at)
	}
	e.status = status
}

// setFail records (or, nil, clears) entry k's failure.
func (t *resTable) setFail(k int, f *resFailure) {
	e := &t.ents[k]
	if f == nil {
		if e.failed {
			delete(t.fails, t.names.names[k])
			e.failed = false
		}
		return
	}
	if t.fails == nil {
		t.fails = make(map[name]resFailure)
	}
	t.fails[t.names.names[k]] = *f
	e.failed = true
}

// room makes room for n more entries at once, rather than by doubling.
func (t *resTable) room(n, max int) {
	n = min(n, max-len(t.ents))
	if n > cap(t.ents)-len(t.ents) {
		t.ents = slices.Grow(t.ents, n)
		t.names.names = slices.Grow(t.names.names, n)
	}
}

// remove drops entry k, moving the last into its place as names does.
func (t *resTable) remove(ts *typeState, s *stream, k int, at time.Time, evs []Event) []Event {
	evs = t.clearNotSent(ts, s, k, at, false, evs)
	t.set(k, ClientUnknown, 0)
	t.setFail(k, nil)
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
	now := at.UnixNano()
	for n, v := range req.InitialVersions {
		if n == "*" || t.names.findString(n, -1) >= 0 {
			continue
		}
		if k := t.add(unique.Make(n), ClientACKed, now, max); k >= 0 {
			t.ents[k].version = unique.Make(v)
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
		if st := t.ents[k].status; ts.wildcard && st != ClientRequested && st != ClientDoesNotExist {
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
	return evs
}

// pushed keeps what the tracker's push does not: the Delta resources' own
// versions, and the control plane's per-resource errors, until the answer.
func (t *resTable) pushed(resp *codec.Response) {
	clear(t.versions)
	t.versions = t.versions[:0]
	if resp.Delta {
		for i := range resp.Resources {
			var v name
			if b := resp.Resources[i].Version; len(b) > 0 {
				v = intern(b)
			}
			t.versions = append(t.versions, v)
		}
	}
	t.errs = append(t.errs[:0], resp.ResourceErrors...)
}

// answered applies the latest push as its client's answer says: everything
// it carried accepted, but what a NACK's message says it rejected. A
// superseded push (nack false) counts as accepted, as the tracker assumes.
// It runs before the tracker applies the push to its own state.
func (t *resTable) answered(ts *typeState, s *stream, nack *codec.ErrorDetail, at time.Time, max int, evs []Event) []Event {
	p := &ts.p
	sent := p.ev.SentAt.UnixNano()
	pushVersion := unique.Make(p.ev.Version)
	var rejected map[string]string
	if nack != nil {
		rejected = rejectedNames(p, nack.Message)
	}
	n0 := len(t.ents)
	var seen []int32
	if p.replace {
		seen = ts.sc.marksFor(n0)
	}
	if ts.wildcard {
		t.room(len(p.res)-len(t.ents), max)
	}
	var c cursor
	for i := range p.res {
		r := &p.res[i]
		k := t.names.findName(r.name, c.guess())
		c.found(k)
		if k < 0 {
			if !ts.wildcard || r.heartbeat {
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
				e.at = sent
			}
			t.set(k, ClientNACKed, sent)
			evs = t.clearNotSent(ts, s, k, at, true, evs)
			continue
		}
		e.version, e.at = v, sent
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
			if !ts.wildcard {
				continue
			}
			if k = t.add(unique.Make(re.Name), ClientUnknown, sent, max); k < 0 {
				continue
			}
		}
		t.setFail(k, &resFailure{version: p.ev.Version, message: re.Error.Message, at: sent})
		t.set(k, ClientReceivedErr, sent)
	}
	clear(t.versions)
	t.versions, t.errs = t.versions[:0], t.errs[:0]
	return evs
}

// received reports whether entry k holds something the client got.
func (t *resTable) received(k int) bool {
	switch t.ents[k].status {
	case ClientACKed, ClientNACKed:
		return t.ents[k].version != (name{})
	}
	return false
}

// gone applies the control plane's removal of entry k: a resource the
// client still asks for by name does not exist, at once; one it had only
// under the wildcard leaves it.
func (t *resTable) gone(ts *typeState, s *stream, k int, sent int64, at time.Time, evs []Event) []Event {
	if ts.sub.findName(t.names.names[k], -1) < 0 {
		return t.remove(ts, s, k, at, evs)
	}
	t.setFail(k, nil)
	e := &t.ents[k]
	e.version, e.at = name{}, sent
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
	oldest := int64(0)
	for k := range t.ents {
		e := &t.ents[k]
		if e.status != ClientRequested {
			continue
		}
		if now.UnixNano()-e.at < int64(timeout) {
			if oldest == 0 || e.at < oldest {
				oldest = e.at
			}
			continue
		}
		t.set(k, ClientDoesNotExist, e.at)
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
		Name: t.names.names[k].Value(), Since: time.Unix(0, e.at), At: at, Removed: removed})
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

// The defaults of Config.InitialFetchTimeout and Config.MaxResources.
const (
	DefaultInitialFetchTimeout = 15 * time.Second
	DefaultMaxResources        = 100_000
)

func (e ResourceNotSent) streamRef() *StreamRef      { return e.Ref }
func (e ResourceNotSentEnded) streamRef() *StreamRef { return e.Ref }
