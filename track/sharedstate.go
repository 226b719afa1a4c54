package track

import (
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"unsafe"
	"weak"
)

// An acknowledged state is, more often than not, the same on many streams:
// the sidecars of a namespace accepted the same clusters with the same
// bodies, and a tap in front of istiod holds thousands of them. So once a
// pass over a state is over, its names and hashes are looked up by content
// tap-wide, and a stream whose state another stream holds already shares
// that one: 1,000 streams of 200 resources hold 3.2 KB of them once rather
// than 3.2 MB. A shared state is never written; the next pass that changes
// it works on a copy in its scratch, and the result is looked up again, so
// a fan-out of one push to every stream copies nothing once the first
// stream stored it. The store holds its states weakly: one that no stream
// holds any more is collected, and its entry with it.

// sharedFrom is the fewest names whose state is shared: a smaller one costs
// less than its lookup and its entry.
const sharedFrom = 8

// sharedState is a state held by every stream whose state it is, read-only.
type sharedState struct {
	names  []name
	hashes []uint64
}

type sharedShard struct {
	mu sync.Mutex
	m  map[uint64][]weak.Pointer[sharedState]
}

// sharedStates are sharded by content, so that streams answered at once
// seldom meet on a lock.
var sharedStates [64]sharedShard

// contentSum mixes a state's names (their interned strings' addresses,
// which are equal exactly when the names are) and hashes.
func contentSum(names []name, hashes []uint64) uint64 {
	x := uint64(len(names))
	for i, n := range names {
		p := uint64(uintptr(unsafe.Pointer(unsafe.StringData(n.Value()))))
		x = bits.RotateLeft64(x^(hashes[i]+p*0x9e3779b97f4a7c15), 29) * 0x94d049bb133111eb
	}
	return x
}

// shareState returns the stored state with these names and hashes, or
// stores one: these slices themselves when owned (the caller never writes
// them again), else a copy.
func shareState(names []name, hashes []uint64, owned bool) *sharedState {
	sum := contentSum(names, hashes)
	sh := &sharedStates[sum%uint64(len(sharedStates))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, w := range sh.m[sum] {
		if s := w.Value(); s != nil && slices.Equal(s.hashes, hashes) && slices.Equal(s.names, names) {
			return s
		}
	}
	if owned {
		names, hashes = slices.Clip(names), slices.Clip(hashes)
	} else {
		names, hashes = slices.Clone(names), slices.Clone(hashes)
	}
	s := &sharedState{names: names, hashes: hashes}
	if sh.m == nil {
		sh.m = make(map[uint64][]weak.Pointer[sharedState])
	}
	sh.m[sum] = append(sh.m[sum], weak.Make(s))
	runtime.AddCleanup(s, forgetState, sum)
	return s
}

// forgetState drops the entries of collected states under sum.
func forgetState(sum uint64) {
	sh := &sharedStates[sum%uint64(len(sharedStates))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	live := slices.DeleteFunc(sh.m[sum], func(w weak.Pointer[sharedState]) bool { return w.Value() == nil })
	if len(live) == 0 {
		delete(sh.m, sum)
	} else {
		sh.m[sum] = live
	}
}

// thaw makes the state writable for one pass: a shared state is copied
// into the pass's scratch. freeze must end the pass.
func (a *ackedSet) thaw(sc *scratch) {
	if a.shared == nil {
		return
	}
	a.names = append(sc.thawNames[:0], a.names...)
	a.hashes = append(sc.thawHashes[:0], a.hashes...)
	sc.thawNames, sc.thawHashes = a.names[:0], a.hashes[:0]
	a.shared = nil
}

// freeze ends a pass over the state: it is looked up tap-wide and shared
// (or kept as the stream's own when small). What it holds of the pass's
// scratch is copied out; the scratch keeps no name.
func (a *ackedSet) freeze(sc *scratch) {
	inScratch := len(a.names) > 0 && cap(sc.thawNames) > 0 &&
		(unsafe.SliceData(a.names) == unsafe.SliceData(sc.thawNames) || unsafe.SliceData(a.hashes) == unsafe.SliceData(sc.thawHashes))
	switch {
	case len(a.names) >= sharedFrom:
		s := shareState(a.names, a.hashes, !inScratch)
		a.names, a.hashes, a.shared = s.names, s.hashes, s
	case inScratch:
		a.names, a.hashes = slices.Clone(a.names), slices.Clone(a.hashes)
	}
	clear(sc.thawNames[:cap(sc.thawNames)])
	sc.thawNames, sc.thawHashes = sc.thawNames[:0], sc.thawHashes[:0]
}
