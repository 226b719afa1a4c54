package track

import (
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/adstap/adstap/internal/canon"
	"github.com/adstap/adstap/internal/weakintern"
)

// A stream's state of a type is, more often than not, the same as many
// other streams': the sidecars of a namespace accepted the same clusters
// with the same bodies, and a tap in front of istiod holds thousands of
// them. So a list of names and what goes with them (the acknowledged
// state's hashes, the CSDS table's entries) that has not changed since
// the last tick is looked up by content tap-wide at the tick, and a stream
// whose list another stream holds already shares that one: 1,000 streams
// of 200 resources hold 3.2 KB of acknowledged state once rather than
// 3.2 MB. A shared list is never written: the next change copies it first
// and the copy is the stream's own until a tick shares it again, so a
// stream pays at most one copy and one lookup of its list a tick, however
// many pushes change it in between, and a push that changes one resource
// of 10,000 costs what it changes. The store holds its lists weakly: one
// that no stream holds any more is collected, and its entry with it. A
// stream's index of its names stays its own: a shared list has its names
// at the same positions.

// sharedFrom is the fewest names whose list is shared: a smaller one costs
// less than its lookup and its entry.
const sharedFrom = 8

// sharedList is a list held by every stream whose list it is, read-only.
type sharedList[T comparable] struct {
	names []canon.Name
	vals  []T
	// found: a stream other than the one that stored it found it, so the
	// streams holding it are likely to be sent the same pushes.
	found atomic.Bool
	// memo is what a room keeps on the list for the other streams that
	// hold it: an acknowledged state's latest push loaded against it
	// (acknowledged.load), which the same push to them loads the same.
	memo atomic.Value
}

// sharedStore holds the lists by content; key folds a value into the
// content's sum.
type sharedStore[T comparable] struct {
	lists weakintern.Store[sharedList[T]]
	key   func(T) uint64
	// spares are the slices of lists that streams let go of for a shared
	// equal one, for the next stream's copy (sharing.own): a change sent
	// to the streams that share a list copies it in each, and each copy
	// made afresh is fresh memory, which costs its page faults.
	spares sync.Pool // of *spareList[T]
}

// spareList is a list's slices, emptied.
type spareList[T comparable] struct {
	names []canon.Name
	vals  []T
}

// sum mixes a list's names (their interned strings' addresses, which are
// equal exactly when the names are) and values.
func (st *sharedStore[T]) sum(names []canon.Name, vals []T) uint64 {
	x := uint64(len(names))
	for i, n := range names {
		p := uint64(uintptr(unsafe.Pointer(unsafe.StringData(n.Value()))))
		x = bits.RotateLeft64(x^(st.key(vals[i])+p*0x9e3779b97f4a7c15), 29) * 0x94d049bb133111eb
	}
	return x
}

// share returns the stored list with these names and values, or stores
// one: these slices themselves when owned (the caller never writes them
// again), else a copy.
func (st *sharedStore[T]) share(names []canon.Name, vals []T, owned bool) *sharedList[T] {
	stored := false
	l := st.lists.Get(st.sum(names, vals),
		func(l *sharedList[T]) bool { return slices.Equal(l.vals, vals) && slices.Equal(l.names, names) },
		func() *sharedList[T] {
			stored = true
			if owned {
				return &sharedList[T]{names: slices.Clip(names), vals: slices.Clip(vals)}
			}
			return &sharedList[T]{names: slices.Clone(names), vals: slices.Clone(vals)}
		})
	if !stored && !l.found.Load() {
		l.found.Store(true)
	}
	return l
}

// sharing is a list's hold on the tap-wide list that it is, if any.
type sharing[T comparable] struct {
	shared *sharedList[T]
	// copiedFound: own copied a shared list that other streams were found
	// holding, whom the same change most likely comes to (reshare).
	copiedFound bool
	// resharedSinceTick: reshare looked the list up since the last tick.
	resharedSinceTick bool
}

// own makes a list the stream's own to write, copying it if it is shared:
// into a spare of st's, when one fits.
func (s *sharing[T]) own(st *sharedStore[T], names *[]canon.Name, vals *[]T) {
	if s.shared == nil {
		return
	}
	s.copiedFound = s.shared.found.Load()
	n := len(*names)
	// A spare much larger than the list would hold its capacity for as
	// long as the stream holds the list.
	if sp, ok := st.spares.Get().(*spareList[T]); ok && cap(sp.names) >= n && cap(sp.vals) >= n && cap(sp.names) <= 2*n+16 {
		*names, *vals = append(sp.names[:0], *names...), append(sp.vals[:0], *vals...)
	} else {
		*names, *vals = slices.Clone(*names), slices.Clone(*vals)
	}
	s.shared = nil
}

// share looks a list the stream owns up tap-wide, at a tick: it shares the
// list another stream holds, or stores its own for the streams to come.
func (s *sharing[T]) share(st *sharedStore[T], names *[]canon.Name, vals *[]T) {
	s.copiedFound, s.resharedSinceTick = false, false
	s.lookUp(st, names, vals)
}

// reshare looks the list up at once after a change (an answer) that
// copied a list other streams were found holding: the same change sent to
// them all (a push to a mesh) leaves them equal again, and each copy goes
// back to st's spares for the next stream's rather than to the collector
// at the tick. Once a tick, so that a stream changed many times pays at
// most two copies and lookups a tick, not one a change.
func (s *sharing[T]) reshare(st *sharedStore[T], names *[]canon.Name, vals *[]T) {
	if !s.copiedFound || s.resharedSinceTick {
		return
	}
	s.copiedFound, s.resharedSinceTick = false, true
	s.lookUp(st, names, vals)
}

func (s *sharing[T]) lookUp(st *sharedStore[T], names *[]canon.Name, vals *[]T) {
	if s.shared != nil || len(*names) < sharedFrom {
		return
	}
	l := st.share(*names, *vals, true)
	if unsafe.SliceData(l.names) != unsafe.SliceData(*names) {
		clear(*names) // pins no name
		st.spares.Put(&spareList[T]{names: (*names)[:0], vals: (*vals)[:0]})
	}
	*names, *vals, s.shared = l.names, l.vals, l
}
