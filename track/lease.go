package track

import (
	"math/bits"
	"sync/atomic"
)

// An output that follows what each client accepted (the retained
// configuration, the reference check, inspect) registers as a taker of
// accepted pushes before any stream starts. The tracker then hands each
// accepted push (Accepted) to the takers that take it, one lease each: a
// taker gets a lease only for what it takes, and the last lease released
// gives the push's bytes back to the keeper. No output needs to know how
// many others read the same push.

// Accepted is what an acknowledged push kept, handed to the outputs with
// its ACK (PushEnded.Accepted and LateAnswer.Accepted, with
// a taker of it, Tracker.TakeAccepted): its resources as the tap decoded them, for an
// output to keep what the client accepted (the retained configuration), on
// its own goroutine. The tracker is what tells pushes awaiting an answer
// from accepted ones; whoever keeps a copy of what was accepted needs no
// other account of them. The views count against Config.KeepBytes until
// the last of its leases is released: a taker leases it
// (Taker.Lease) and releases the lease once done with the views.
type Accepted struct {
	Version string // version_info (SotW) or system_version_info (Delta)
	// Replace is set when the push is the whole set of its type (SotW LDS
	// and CDS, wildcard and unrequested types): what it lacks is removed.
	Replace bool
	// Resources are the push's resources in its order, their bodies views
	// into the push's bytes valid until the reader's lease is released.
	Resources []AcceptedResource
	// Removed are the Delta push's removed_resources, or, when Partial,
	// the names a SotW push replacing its type no longer carried.
	Removed []string
	// Bytes is what the push's kept bytes and the views take until
	// released, for an output's bound on the work waiting for it; bytes
	// shared with other streams' pushes (the same sent to each) are
	// counted by the push that kept them first.
	Bytes int64
	// NotKept says why the resources are not at hand, as for a Rejected;
	// empty when they are.
	NotKept string
	// Partial is set when Resources are only those the push added or
	// changed since the state the client acknowledged before it, as the
	// outputs were handed it (the previous Accepted of the type, or the
	// requests since): every other resource it holds stays as it was, but
	// for Removed, the names a push that replaces its type no longer
	// carried. Replace is then unset. A push of 10,000 resources that
	// changed 200 hands over 200, so that following what a client accepted
	// costs what a push changed, not what it carried.
	Partial bool

	kept keptBytes
	// takers are the takers it is leased to, a bit each; claimed those
	// that have taken their lease.
	takers  takerSet
	claimed atomic.Uint64
	leases  [inlineLeases]Lease // the first takers', by rank in takers
}

// maxTakers is how many takers a tracker can have: one bit each in a
// takerSet.
const maxTakers = 64

// inlineLeases is how many leases of an Accepted live in it: as many as the
// tap has takers (the retained configuration, the reference check).
const inlineLeases = 2

// takerSet is a set of takers, by their index.
type takerSet uint64

func (s takerSet) count() int { return bits.OnesCount64(uint64(s)) }

// Taker is an output registered to take accepted pushes (TakeAccepted).
type Taker struct {
	bit   takerSet
	takes Takes
}

// Lease is a taker's hold on an accepted push: its views stay valid until
// Release.
type Lease struct {
	a    *Accepted
	done bool
}

// Lease returns the taker's lease on a, or nil when a is nil or the taker
// does not take it (another type, a superseded push it does not follow):
// a taker never holds what it did not ask for. Each taker gets one lease
// per push; asking again returns nil. Lease may be called from any
// goroutine, and a taker must release every lease it gets, whether or not
// it reads it.
func (tk *Taker) Lease(a *Accepted) *Lease {
	if tk == nil || a == nil || a.takers&tk.bit == 0 {
		return nil
	}
	for {
		c := a.claimed.Load()
		if c&uint64(tk.bit) != 0 {
			return nil
		}
		if a.claimed.CompareAndSwap(c, c|uint64(tk.bit)) {
			// The first leases live in the Accepted: a lease costs the
			// hot path no allocation of its own with the pipeline's takers.
			if i := (a.takers & (tk.bit - 1)).count(); i < len(a.leases) {
				a.leases[i].a = a
				return &a.leases[i]
			}
			return &Lease{a: a}
		}
	}
}

// Accepted is the push leased; nil for a nil lease.
func (l *Lease) Accepted() *Accepted {
	if l == nil {
		return nil
	}
	return l.a
}

// Release lets go of the lease: its views are not to be read from then on.
// The last lease of a push released gives its bytes back. A lease is held
// by one output, which may release it more than once: only the first
// counts. A nil lease is fine.
func (l *Lease) Release() {
	if l == nil || l.done {
		return
	}
	l.done = true
	a := l.a
	if a.kept.data == nil {
		return
	}
	if a.kept.owners == nil {
		a.kept.once.Do(a.kept.free)
		return
	}
	a.kept.release(a.kept.data)
}
