package track

import (
	"fmt"
	"slices"
	"strconv"

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
// name in resTable.names. It is 8 bytes: what the entries of one push have
// in common, the version and when it arrived, is a stamp they share
// (resTable.stamps), and a stream of 10,000 clusters holds its entries in
// one slice, its names shared tap-wide.
type resEntry struct {
	// stamp is the entry's resStamp in resTable.stamps, 0 for none.
	stamp  uint32
	status ClientStatus
	// failed says resTable.fails holds the latest rejection or
	// control-plane error of the resource, until it is accepted again.
	failed bool
	// notSent is set once the resource was reported ResourceNotSent, until
	// ResourceNotSentEnded.
	notSent bool
}

// resStamp is an entry's accepted version (the zero handle for none) and,
// in Unix nanoseconds, when it arrived, or, REQUESTED and DOES_NOT_EXIST,
// since when the resource was asked for. A push's entries, or a request's,
// share one; uses counts the entries that hold it, and a stamp none holds
// is reused.
type resStamp struct {
	version name
	at      int64
	uses    uint32
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
	// sharing, when set, is the tap-wide list that names.names and ents
	// are, read-only (sharedstate.go).
	sharing[resEntry]
	// stamps are the entries' versions and times; stamps[0], once there
	// is any, is none. free are the stamps no entry holds, and recent the
	// two stamps handed out last, which the next entry most likely shares:
	// an answer adds an entry (since when) and accepts it (the version).
	stamps []resStamp
	free   []uint32
	recent [2]uint32
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

// tableStates are the tables shared tap-wide.
var tableStates = &sharedStore[resEntry]{key: func(e resEntry) uint64 {
	k := uint64(e.stamp)<<16 | uint64(e.status)<<8
	if e.failed {
		k |= 2
	}
	if e.notSent {
		k |= 1
	}
	return k
}}

// own makes the table the stream's own to change (sharedstate.go).
func (t *resTable) own() { t.sharing.own(tableStates, &t.names.names, &t.ents) }

// share shares the table, at a tick (sharedstate.go).
func (t *resTable) share() { t.sharing.share(tableStates, &t.names.names, &t.ents) }

// reshare shares the table after an answer (sharedstate.go).
func (t *resTable) reshare() { t.sharing.reshare(tableStates, &t.names.names, &t.ents) }

// tracksResources reports whether a type's resources are followed one by
// one: not the questions istioctl and istio-agent ask on a stream.
func tracksResources(url string) bool {
	return url != codec.TypeSyncz && url != codec.TypeHealthInfo
}

// add appends an entry for n, which the table lacks; -1 past the bound.
func (t *resTable) add(n name, status ClientStatus, at int64, max int) int {
	if len(t.ents) >= max {
		t.dropped++
		return -1
	}
	t.names.add(n)
	t.ents = append(t.ents, resEntry{status: status})
	t.stamp(len(t.ents)-1, name{}, at)
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

// received reports whether entry k holds something the client got.
func (t *resTable) received(k int) bool {
	switch t.ents[k].status {
	case ClientACKed, ClientNACKed:
		return t.stampOf(k).version != (name{})
	}
	return false
}

// stampOf returns entry k's version and time.
func (t *resTable) stampOf(k int) resStamp {
	if i := t.ents[k].stamp; i != 0 {
		return t.stamps[i]
	}
	return resStamp{}
}

// stamp gives entry k version v at at, sharing the latest stamp when it is
// the same.
func (t *resTable) stamp(k int, v name, at int64) {
	e := &t.ents[k]
	var i uint32
	if v != (name{}) || at != 0 {
		i = t.stampFor(v, at)
		t.stamps[i].uses++
	}
	t.release(e.stamp)
	e.stamp = i
}

// stampFor returns a recent stamp of v at at, or a new one.
func (t *resTable) stampFor(v name, at int64) uint32 {
	for _, r := range t.recent {
		if r != 0 && t.stamps[r].version == v && t.stamps[r].at == at {
			return r
		}
	}
	if len(t.stamps) == 0 {
		t.stamps = append(t.stamps, resStamp{}) // none
	}
	var i uint32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		i = uint32(len(t.stamps))
		t.stamps = append(t.stamps, resStamp{})
	}
	t.stamps[i] = resStamp{version: v, at: at}
	if t.recent[0] != i { // a stamp let go of and taken again is one
		t.recent[0], t.recent[1] = i, t.recent[0]
	}
	return i
}

// release lets go of an entry's hold on stamp i.
func (t *resTable) release(i uint32) {
	if i == 0 {
		return
	}
	s := &t.stamps[i]
	if s.uses--; s.uses == 0 {
		*s = resStamp{}
		t.free = append(t.free, i)
	}
}
