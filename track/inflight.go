package track

import (
	"math/bits"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/adstap/adstap/codec"
)

type pushState uint8

const (
	pushNone     pushState = iota // nothing sent yet
	pushOpen                      // sent, waiting for its answer
	pushTimedOut                  // ended as a timeout, but still the latest: a late answer is still possible
	pushAnswered                  // ended by an ACK or NACK, or closed
)

// sentPush is what the tracker keeps of the type's latest push past its
// ACK: where it stands, and the nonce, version and time a request's nonce
// is matched against and the pages show. An idle type holds this much of
// it; the rest (push) goes back to a pool with the ACK.
type sentPush struct {
	state          pushState
	version, nonce string
	at             time.Time
}

// pending reports whether the push still awaits its answer (including one
// that timed out).
func (s *sentPush) pending() bool { return s.state == pushOpen || s.state == pushTimedOut }

// push is the latest response of a type. It is rewritten in place by the
// next response, reusing its slices, so a stream pushing all day holds no
// more than its largest push.
type push struct {
	ev Push
	// sent is ev as the push's events carry it, from its PushSent to its
	// PushEnded or LateAnswer: never written once given out.
	sent *Push
	// held is what the push keeps for its NACK while it awaits its answer
	// (hold.go).
	held kept
	// loaded: the push holds a response's resources (load), whose diff
	// the next push may share (send).
	loaded bool
	// fresh is the number of res not in the acknowledged state (pos < 0):
	// at most what applying the push adds to it.
	fresh int32
	res   []pushedRes
	// buf is where res lives when it is borrowed from resPools; nil when
	// res is a large push's own (see keptPushRes), shared, or empty.
	buf *resBuf
	// resShared: res is a loadedPush's, which other streams' pushes read:
	// never written, given back or kept for the next push.
	resShared bool
	removed   []string // Delta removed_resources
	// content identifies what was pushed regardless of version, nonce and
	// order: a NACK loop re-sends the same content under new versions.
	content uint64
	gen     uint64 // acknowledged.gen the diff was computed against
	delta   bool
	// replace is set when the push is the whole set of the type (SotW LDS,
	// CDS and wildcard subscriptions), so what it lacks is removed.
	replace bool
}

// pushPool holds the pushes of types whose latest push was acknowledged,
// for the next push of any stream: an idle type keeps only its sentPush.
var pushPool = sync.Pool{New: func() any { return new(push) }}

// dropApplied lets go of what an acknowledged push no longer needs, so that
// an idle stream holds its resources once: they are in the acknowledged state
// now, and the diff's names were reported. A large push's slice is kept all
// the same, since allocating it again would make garbage the size of the
// push at every push.
func (p *push) dropApplied() {
	if p.buf != nil {
		p.buf.giveBack(p.res)
		p.res, p.buf = nil, nil
	}
	if p.resShared {
		p.res, p.resShared = nil, false
	}
	d := &p.ev.Diff
	d.AddedNames, d.RemovedNames, d.ChangedNames = nil, nil, nil
}

// nameAt is the name of resp.Resources[i] as a string: the one the push's
// load found or interned when it is there.
func (p *push) nameAt(resp *codec.Response, i int) string {
	name := resp.Resources[i].Name
	if i < len(p.res) {
		if n := p.res[i].name.Value(); n == string(name) {
			return n
		}
	}
	return intern(name).Value()
}

// ownRes makes the push's resources its own to write, copying them if
// they are shared.
func (p *push) ownRes() {
	if p.resShared {
		res, buf := newPushedRes(len(p.res))
		p.res, p.buf, p.resShared = append(res, p.res...), buf, false
	}
}

type pushedRes struct {
	name name
	hash uint64
	// pos is where the resource is in the acknowledged state as it was when
	// the push was loaded (while push.gen is acknowledged.gen), -1 if absent.
	pos       int32
	heartbeat bool // a TTL refresh without a body: it keeps what the client has
}

// keptPushRes is the number of resources above which a push's slice is its
// stream's own, kept from push to push; smaller ones are borrowed from
// resPools (see dropApplied).
const keptPushRes = 1 << maxResClass

// maxResClass is the largest size class of resPools: 1<<maxResClass
// resources.
const maxResClass = 10

// resBuf is a slice for a push's resources, of a size class of resPools.
type resBuf struct{ res []pushedRes }

// resPools hold, by size class c, slices of room for 1<<c resources. A
// stream borrows one for each push and gives it back at the ACK, so that a
// mesh's streams, pushed at once, share the slices of their pushes in
// flight rather than each holding one between pushes (an idle stream holds
// none) or making one of garbage at every push.
var resPools [maxResClass + 1]sync.Pool

// newPushedRes returns an empty slice with room for n resources, and the
// resBuf it was borrowed in, nil for a slice of the caller's own.
func newPushedRes(n int) ([]pushedRes, *resBuf) {
	if n > keptPushRes {
		return make([]pushedRes, 0, n), nil // once, rather than by doubling
	}
	c := bits.Len(uint(n - 1)) // the smallest class with room for n
	if b, ok := resPools[c].Get().(*resBuf); ok {
		return b.res[:0], b
	}
	b := &resBuf{res: make([]pushedRes, 0, 1<<c)}
	return b.res, b
}

// giveBack returns b to its pool; res is what was last used of it, which
// is cleared so that the pool holds on to no name.
func (b *resBuf) giveBack(res []pushedRes) {
	clear(res)
	b.res = res[:0]
	resPools[bits.Len(uint(cap(b.res)-1))].Put(b)
}

// Salts keep a heartbeat or a removal from cancelling out a resource body
// that happens to hash to the same value.
const (
	heartbeatSalt = 0x9e3779b97f4a7c15
	removedSalt   = 0xc2b2ae3d27d4eb4f
)

// contentOf identifies what a response carries, whatever its version, nonce
// and resource order: the sum of the mixed hashes of its resources (and, in
// Delta, of the names it removes). A sum is order-independent yet, unlike a
// xor, does not cancel a resource sent twice.
func contentOf(resp *codec.Response) uint64 {
	h := mix(uint64(len(resp.Resources)))
	for i := range resp.Resources {
		r := &resp.Resources[i]
		x := r.Hash
		if r.Heartbeat {
			x = xxhash.Sum64(r.Name) ^ heartbeatSalt
		}
		h += mix(x)
	}
	for _, name := range resp.RemovedResources {
		h += mix(xxhash.Sum64String(name) ^ removedSalt)
	}
	return h
}

// mix is splitmix64's finalizer: it spreads the bits of a hash so that sums
// of related hashes do not collide.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
