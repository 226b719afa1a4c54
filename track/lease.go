package track

import "math/bits"

// An output that follows what each client accepted (the retained
// configuration, the reference check, inspect) registers as a taker of
// accepted pushes before any stream starts. The tracker then hands each
// accepted push (Accepted) to the takers that take it, one lease each: a
// taker gets a lease only for what it takes, and the last lease released
// gives the push's bytes back to the keeper. No output needs to know how
// many others read the same push.

// maxTakers is how many takers a tracker can have: one bit each in a
// takerSet.
const maxTakers = 64

// inlineLeases is how many leases of an Accepted live in it: as many as the
// tap has takers (the retained configuration, the reference check).
const inlineLeases = 2

// takerSet is a set of takers, by their index.
type takerSet uint64

func (s takerSet) count() int { return bits.OnesCount64(uint64(s)) }

// Takes says which accepted pushes a taker takes.
type Takes struct {
	// Types selects the types taken by their type URL; nil takes every
	// type.
	Types func(typeURL string) bool
	// Superseded also takes a push superseded before its answer, which the
	// tracker assumes the client applied (the reference check follows
	// what a client applies, not only what it acknowledged).
	Superseded bool
}

// Taker is an output registered to take accepted pushes (TakeAccepted).
type Taker struct {
	bit   takerSet
	takes Takes
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
// any stream is tracked.
func (t *Tracker) TakeChanged() { t.keep.handsOver = true }

// takersOf are the takers of the accepted pushes of typeURL; superseded:
// of those superseded before their answer.
func (k *keeper) takersOf(typeURL string, superseded bool) takerSet {
	var s takerSet
	for i, tk := range k.takers {
		if (tk.Types == nil || tk.Types(typeURL)) && (tk.Superseded || !superseded) {
			s |= 1 << i
		}
	}
	return s
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
