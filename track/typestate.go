package track

import (
	"time"

	"github.com/adstap/adstap/codec"
)

// typeState is what the tracker knows of one type on one stream. Its size is
// bounded by the resources of the type: the acknowledged name->hash map, the
// subscription, and the latest push; nothing here grows with the number of
// pushes.
type typeState struct {
	url, short string
	// replaceType marks LDS and CDS, whose SotW responses always carry the
	// whole set the client needs, so a name missing from one is removed.
	replaceType bool

	requested bool // the client asked for the type on this stream
	wildcard  bool
	// explicit is set once the client named resources of the type: from then
	// on, in SotW, an empty name list for a non-LDS/CDS type is an
	// unsubscribe rather than the legacy wildcard.
	explicit bool
	// sub holds the explicitly subscribed names; the value is scratch space
	// for counting the names a push carries (see mark).
	sub map[string]uint64

	// acked is the client's acknowledged state: name -> content hash.
	acked map[string]ackedRes
	// baseline is set once acked means something: a push of the type was
	// acknowledged (or assumed applied), so an empty map is a known empty state.
	baseline bool
	// gen changes whenever acked or sub change, so a push identical to the
	// previous one can reuse its diff.
	gen uint64
	// mark is bumped for every pass over acked or sub that needs to know which
	// names it has seen, so no per-push set is allocated.
	mark uint64

	sentVersion, sentNonce   string
	ackedVersion, ackedNonce string
	nacked                   bool // the latest answered push was rejected
	lastError                string
	fullSynced               bool      // the type has had its initial full sync on this stream
	lastFull                 time.Time // the last repeated full sync of the type

	pushes, acks, nacks, staleNonces, redundant, fullSyncs int

	p push // the latest push; p.state says whether there is one

	// NACK storm: the last NACK times, enough to tell a storm from a burst;
	// allocated on the first NACK, since most types never see one.
	nackTimes window
	storm     *episode
	// NACK loop: the content of the NACKed push and how many times in a row
	// it was NACKed.
	loopContent uint64
	loopRun     int
	loop        *episode
	// errNames caches the names a NACK mentions, since a loop NACKs the same
	// content with the same message again and again.
	errNames errNamesCache
}

// ackedRes is one resource of the acknowledged state. It keeps its own name so
// that a lookup by a decoded []byte yields a string without allocating.
type ackedRes struct {
	name string
	hash uint64
	mark uint64
}

func newTypeState(url string) *typeState {
	return &typeState{
		url:         url,
		short:       codec.ShortType(url),
		replaceType: url == codec.TypeListener || url == codec.TypeCluster,
		sub:         make(map[string]uint64),
		acked:       make(map[string]ackedRes),
	}
}

// subscribed reports whether the client currently wants the named resource.
func (ts *typeState) subscribed(name string) bool {
	if ts.wildcard || !ts.requested {
		return true
	}
	_, ok := ts.sub[name]
	return ok
}

// empty reports whether the client wants nothing of the type.
func (ts *typeState) empty() bool { return !ts.wildcard && len(ts.sub) == 0 }

// pending reports whether the latest push still awaits its answer (including
// one that timed out).
func (ts *typeState) pending() bool { return ts.p.state == pushOpen || ts.p.state == pushTimedOut }

// stateName follows istioctl proxy-status, with the rejection taken from the
// latest answered push.
func (ts *typeState) stateName() string {
	switch {
	case ts.pushes == 0:
		return "NOT_SENT"
	case ts.nacked:
		return "NACKED"
	case ts.ackedNonce == ts.sentNonce:
		return "SYNCED"
	}
	return "STALE"
}

// pruneUnsubscribed drops acknowledged resources the client no longer wants:
// an unsubscribed resource leaves the client, so it must not count as
// removed (or unchanged) in the next push.
// It is called on every subscription change, which also invalidates the
// diff a repeated push could otherwise reuse.
func (ts *typeState) pruneUnsubscribed() {
	ts.gen++
	if ts.wildcard {
		return
	}
	for name := range ts.acked {
		if _, ok := ts.sub[name]; !ok {
			delete(ts.acked, name)
		}
	}
}

type errNamesCache struct {
	ok      bool
	content uint64
	n       int
	message string
	names   []string
}
