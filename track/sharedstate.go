package track

import (
	"math/bits"
	"slices"
	"unique"
	"unsafe"

	"github.com/adstap/adstap/internal/weakintern"
)

// A stream's state of a type is, more often than not, the same as many
// other streams': the sidecars of a namespace accepted the same clusters
// with the same bodies, and a tap in front of istiod holds thousands of
// them. So once a pass over a list of names and what goes with them (the
// acknowledged state's hashes, the CSDS table's entries) is over, the list
// is looked up by content tap-wide, and a stream whose list another stream
// holds already shares that one: 1,000 streams of 200 resources hold 3.2 KB
// of acknowledged state once rather than 3.2 MB. A shared list is never
// written; the next pass that changes it works on a copy in its scratch,
// and the result is looked up again, so a fan-out of one push to every
// stream copies nothing once the first stream stored it. The store holds
// its lists weakly: one that no stream holds any more is collected, and its
// entry with it. A stream's index of its names stays its own: a shared
// list has its names at the same positions.

// sharedFrom is the fewest names whose list is shared: a smaller one costs
// less than its lookup and its entry.
const sharedFrom = 8

// sharedList is a list held by every stream whose list it is, read-only.
type sharedList[T comparable] struct {
	names []unique.Handle[string]
	vals  []T
}

// sharedStore holds the lists by content; key folds a value into the
// content's sum.
type sharedStore[T comparable] struct {
	lists weakintern.Store[sharedList[T]]
	key   func(T) uint64
}

// sum mixes a list's names (their interned strings' addresses, which are
// equal exactly when the names are) and values.
func (st *sharedStore[T]) sum(names []unique.Handle[string], vals []T) uint64 {
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
func (st *sharedStore[T]) share(names []unique.Handle[string], vals []T, owned bool) *sharedList[T] {
	return st.lists.Get(st.sum(names, vals),
		func(l *sharedList[T]) bool { return slices.Equal(l.vals, vals) && slices.Equal(l.names, names) },
		func() *sharedList[T] {
			if owned {
				return &sharedList[T]{names: slices.Clip(names), vals: slices.Clip(vals)}
			}
			return &sharedList[T]{names: slices.Clone(names), vals: slices.Clone(vals)}
		})
}

// thawBuf holds a shared list's copy while a pass changes it: scratch.
type thawBuf[T comparable] struct {
	names []unique.Handle[string]
	vals  []T
	used  bool // by the pass under way
}

// sharing is a list's hold on the tap-wide list that it is, if any.
type sharing[T comparable] struct {
	shared *sharedList[T]
}

// thaw makes a list writable for one pass: a shared list is copied into
// the pass's scratch. freeze must end the pass.
func (s *sharing[T]) thaw(names *[]unique.Handle[string], vals *[]T, buf *thawBuf[T]) {
	if s.shared == nil {
		return
	}
	*names = append(buf.names[:0], *names...)
	*vals = append(buf.vals[:0], *vals...)
	buf.names, buf.vals, buf.used = (*names)[:0], (*vals)[:0], true
	s.shared = nil
}

// freeze ends a pass over a list: it is looked up tap-wide and shared (or
// kept as the stream's own when small). What it holds of the pass's
// scratch is copied out; the scratch keeps no name.
func (s *sharing[T]) freeze(st *sharedStore[T], names *[]unique.Handle[string], vals *[]T, buf *thawBuf[T]) {
	inScratch := buf != nil && len(*names) > 0 && cap(buf.names) > 0 &&
		(unsafe.SliceData(*names) == unsafe.SliceData(buf.names) || unsafe.SliceData(*vals) == unsafe.SliceData(buf.vals))
	switch {
	case len(*names) >= sharedFrom:
		l := st.share(*names, *vals, !inScratch)
		*names, *vals, s.shared = l.names, l.vals, l
	case inScratch:
		*names, *vals = slices.Clone(*names), slices.Clone(*vals)
	}
	if buf != nil && buf.used {
		clear(buf.names[:cap(buf.names)])
		buf.used = false
	}
}
