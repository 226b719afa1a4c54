package track

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/adstap/adstap/internal/canon"
)

// name is a resource name interned tap-wide. Every sidecar of a mesh is sent
// the same cluster names, so a stream holding a handle rather than a copy
// shares one copy with all the others; and since two handles are equal
// exactly when their names are, comparing names costs a pointer comparison.
type name = canon.Name

// intern is only for names the stream does not hold yet: a name it already
// holds is found by comparing bytes, which costs less than canon's lookup.
func intern(b []byte) name { return canon.MakeBytes(b) }

// The keys of nameSet's index. They are variables so that a test can make
// every name collide.
var (
	nameKey       = xxhash.Sum64
	nameKeyString = xxhash.Sum64String
)

// linearMax is the size up to which a nameSet is searched without an index:
// a few comparisons cost less than hashing, and no index is held.
const linearMax = 8

// nameSet is a set of distinct names kept in the order the peer last sent
// them in. Control planes list resources in the same order push after push,
// and clients their subscriptions request after request, so a walk over the
// next push or request finds nearly every name right after the previous
// one, without hashing. An index, for the names found elsewhere, is built on
// first need and kept up to date until the order is rewritten.
type nameSet struct {
	names []name
	// slots is an open-addressing table with linear probing: the low 32 bits
	// of a name's key in the high half, its position+1 in the low half, 0 for
	// a free slot. It is nil until needed, and stays at most half full.
	slots []uint64
}

// cursor follows a walk over a list that probably names a set's names in the
// set's order, telling where the next name probably is. It stops guessing
// when guesses keep failing, as over a list in an order of its own, where a
// failed guess is a comparison for nothing, and resumes once a name turns up
// where the walk expected it.
type cursor struct {
	next   int
	misses int
}

// maxMisses failed guesses in a row stop the guessing: an insertion or a
// removal costs one, a list in another order costs all.
const maxMisses = 4

func (c *cursor) guess() int {
	if c.misses >= maxMisses {
		return -1
	}
	return c.next
}

// found records where the name was found, -1 for nowhere.
func (c *cursor) found(pos int) {
	if pos == c.next {
		c.misses = 0
	} else {
		c.misses++
	}
	if pos >= 0 {
		c.next = pos + 1
	}
}

// findBytes returns the position of b in the set, or -1. guess is where b
// probably is; any value is safe.
func (s *nameSet) findBytes(b []byte, guess int) int { return find(s, b, guess, nameKey) }

// findString is findBytes for a string.
func (s *nameSet) findString(str string, guess int) int {
	return find(s, str, guess, nameKeyString)
}

// find is findBytes and findString: a name arrives as the decoder's view of
// a push or as a request's string, and converting either to the other would
// copy it.
func find[T string | []byte](s *nameSet, key T, guess int, hash func(T) uint64) int {
	if uint(guess) < uint(len(s.names)) && s.names[guess].Value() == string(key) {
		return guess
	}
	if len(s.names) <= linearMax {
		for i, n := range s.names {
			if n.Value() == string(key) {
				return i
			}
		}
		return -1
	}
	s.index()
	k := uint32(hash(key))
	mask := uint32(len(s.slots) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			return -1
		}
		// Equal keys are not equal names: the name decides.
		if uint32(v>>32) == k {
			if pos := int(uint32(v)) - 1; s.names[pos].Value() == string(key) {
				return pos
			}
		}
	}
}

// findName is findBytes for an interned name. Comparing two strings that
// share their bytes stops at the pointers, so the interned copy costs no
// byte comparison.
func (s *nameSet) findName(n name, guess int) int {
	if uint(guess) < uint(len(s.names)) && s.names[guess] == n {
		return guess
	}
	return s.findString(n.Value(), -1)
}

// indexKeptFrom is the fewest names whose set keeps its index between
// passes. A smaller set lets go of it once a pass is over (idle): its
// index was the largest part of an idle stream's state — 2 KB for a type
// of 100 resources, half the size of the names it indexes, for each of
// the stream's tables of them — and the next pass that needs it builds it
// again from at most this many hashes, where most passes need none: a
// control plane lists resources in the same order push after push.
const indexKeptFrom = 1024

// idle lets go of the index of a set smaller than indexKeptFrom, once a
// pass over it is over.
func (s *nameSet) idle() {
	if len(s.names) < indexKeptFrom {
		giveSlots(s.slots)
		s.slots = nil
	}
}

// slotPools hold the indexes sets let go of, by size (16 << i slots), for
// the next set that needs one. A sync of many streams builds and lets go
// of an index per set; allocated afresh, each would leave a hole between
// the streams' long-lived state that the heap cannot give back. A pool
// holds each index by its first slot, the size being the pool's: a pointer
// into the index costs nothing to put, where a pointer to a slice header
// was an allocation at every give.
var slotPools [8]sync.Pool // *uint64, the first of 16 << i

func slotPool(size int) *sync.Pool {
	i := bits.Len(uint(size)) - 5 // 16 -> 0
	if i < 0 || i >= len(slotPools) || size != 16<<i {
		return nil
	}
	return &slotPools[i]
}

func borrowSlots(size int) []uint64 {
	if p := slotPool(size); p != nil {
		if first, ok := p.Get().(*uint64); ok {
			return unsafe.Slice(first, size)
		}
	}
	return make([]uint64, size)
}

func giveSlots(slots []uint64) {
	if p := slotPool(len(slots)); p != nil {
		clear(slots)
		p.Put(&slots[0])
	}
}

// index builds the index if there is none.
func (s *nameSet) index() {
	if s.slots != nil {
		return
	}
	size := 16
	for size < 2*len(s.names) {
		size *= 2
	}
	s.slots = borrowSlots(size)
	for i, n := range s.names {
		s.insertSlot(uint32(nameKeyString(n.Value())), i)
	}
}

func (s *nameSet) insertSlot(k uint32, pos int) {
	mask := uint32(len(s.slots) - 1)
	i := k & mask
	for s.slots[i] != 0 {
		i = (i + 1) & mask
	}
	s.slots[i] = uint64(k)<<32 | uint64(pos+1)
}

// slotOf returns the slot holding position pos.
func (s *nameSet) slotOf(pos int) uint32 {
	k := uint32(nameKeyString(s.names[pos].Value()))
	mask := uint32(len(s.slots) - 1)
	i := k & mask
	for uint32(s.slots[i]) != uint32(pos+1) {
		i = (i + 1) & mask
	}
	return i
}

// deleteSlot frees slot i, moving back the entries after it that would no
// longer be found past the gap, so that no tombstones accumulate.
func (s *nameSet) deleteSlot(i uint32) {
	mask := uint32(len(s.slots) - 1)
	for j := (i + 1) & mask; s.slots[j] != 0; j = (j + 1) & mask {
		home := uint32(s.slots[j]>>32) & mask
		// The entry at j may fill the gap unless its home lies after the gap.
		if (j-home)&mask >= (j-i)&mask {
			s.slots[i] = s.slots[j]
			i = j
		}
	}
	s.slots[i] = 0
}

// add appends a name that is not in the set.
func (s *nameSet) add(n name) {
	s.names = append(s.names, n)
	s.indexNew(len(s.names) - 1)
}

// removeAt removes the name at position k, moving the last name into its
// place: a removal costs the same whatever the size of the set.
func (s *nameSet) removeAt(k int) {
	last := len(s.names) - 1
	if s.slots != nil {
		s.deleteSlot(s.slotOf(k))
		if k != last {
			i := s.slotOf(last)
			s.slots[i] = s.slots[i]&^0xffffffff | uint64(k+1)
		}
	}
	s.names[k] = s.names[last]
	s.names[last] = name{}
	s.names = s.names[:last]
}

// reset replaces the names, dropping the index.
func (s *nameSet) reset(names []name) {
	s.names, s.slots = names, nil
}

// droppedSlot marks, during remapIndex, an entry whose name is gone.
const droppedSlot = 0xffffffff

// remapIndex keeps the index valid across a rewrite of the set that moves,
// drops and adds names: where[p] is the new position+1 of the name at old
// position p, 0 if it is dropped. A slot depends only on the name's key, so
// the names that stay keep their slots and need no hashing; the caller adds
// the new names with indexNew once the set holds them.
func (s *nameSet) remapIndex(where []int32) {
	if s.slots == nil {
		return
	}
	for i, v := range s.slots {
		if v == 0 {
			continue
		}
		w := uint64(uint32(where[uint32(v)-1]))
		if w == 0 {
			w = droppedSlot
		}
		s.slots[i] = v&^0xffffffff | w
	}
	// One pass is enough: a deletion moves entries back into the gap at i
	// from after it, and into slots before i only from the start of the
	// table, past its end, where every entry was visited already.
	for i := range s.slots {
		for uint32(s.slots[i]) == droppedSlot {
			s.deleteSlot(uint32(i))
		}
	}
}

// indexNew indexes the name at position pos, which the index lacks.
func (s *nameSet) indexNew(pos int) {
	if s.slots == nil {
		return
	}
	if 2*len(s.names) > len(s.slots) {
		s.slots = nil // rebuilt, twice as large, on next need
		return
	}
	s.insertSlot(uint32(nameKeyString(s.names[pos].Value())), pos)
}

// ackedSet is the acknowledged state of a type: names and, at the same
// positions, the content hashes of their resources.
type ackedSet struct {
	nameSet
	hashes []uint64
	// sharing, when set, is the tap-wide list that names and hashes are,
	// read-only (sharedstate.go).
	sharing[uint64]
}

// ackedStates are the acknowledged states shared tap-wide.
var ackedStates = &sharedStore[uint64]{key: func(h uint64) uint64 { return h }}

// own makes the state the stream's own to change (sharedstate.go).
func (a *ackedSet) own() { a.sharing.own(ackedStates, &a.names, &a.hashes) }

// adopt makes names and hashes, which the set outgrew its slices for, the
// state: the list another stream holds already, or a copy that the
// streams to come share. A state outgrows its slices on a stream's first
// sync of a type, which the sidecars of a namespace go through with the
// same resources; a copy of its own that the next tick swapped for the
// shared list was garbage left between what the streams keep (W3's
// holes). The next change copies it first, as after a tick.
func (a *ackedSet) adopt(names []name, hashes []uint64) {
	l := ackedStates.share(names, hashes, false)
	a.names, a.hashes, a.shared = l.names, l.vals, l
}

// share shares the state, at a tick (sharedstate.go).
func (a *ackedSet) share() { a.sharing.share(ackedStates, &a.names, &a.hashes) }

// reshare shares the state after an answer (sharedstate.go).
func (a *ackedSet) reshare() { a.sharing.reshare(ackedStates, &a.names, &a.hashes) }

func (a *ackedSet) add(n name, hash uint64) {
	a.nameSet.add(n)
	a.hashes = append(a.hashes, hash)
}

func (a *ackedSet) removeAt(k int) {
	last := len(a.hashes) - 1
	a.hashes[k] = a.hashes[last]
	a.hashes = a.hashes[:last]
	a.nameSet.removeAt(k)
}

func (a *ackedSet) reset(names []name, hashes []uint64) {
	a.nameSet.reset(names)
	a.hashes = hashes
}

// rewrite makes names and hashes the state, copied into the set's own
// slices when they are large enough. where maps old positions to new ones
// (see remapIndex), and fresh lists the positions of the names new to the
// set.
func (a *ackedSet) rewrite(names []name, hashes []uint64, where, fresh []int32) {
	a.remapIndex(where)
	switch {
	case cap(a.names) >= len(names):
		if len(a.names) > len(names) {
			clear(a.names[len(names):])
		}
		a.names = append(a.names[:0], names...)
		a.hashes = append(a.hashes[:0], hashes...)
	case len(names) >= sharedFrom:
		a.adopt(names, hashes)
	default:
		a.names = slices.Clone(names)
		a.hashes = slices.Clone(hashes)
	}
	for _, pos := range fresh {
		a.indexNew(int(pos))
	}
}

// scratch is working memory for the passes over a push or a subscription.
// Every pass runs under the tracker's lock, so one scratch serves every
// stream, and no stream holds memory for passes it is not running.
type scratch struct{ *scratchBufs }

// scratchBufs are the slices a scratch lends: pooled tap-wide, so that the
// space a diff needs grows with the largest push being diffed at a moment,
// not with every stream that ever saw a large one.
type scratchBufs struct {
	marks  []int32
	fresh  []int32
	names  []name
	hashes []uint64
	placed placedNames
	// keyHashes and keyNames are a held push's share key's (hold.go).
	keyHashes []uint64
	keyNames  []string
}

var scratchPool = sync.Pool{New: func() any { return new(scratchBufs) }}

// borrow takes slices from the pool, for one call on a locked stream.
func (sc *scratch) borrow() { sc.scratchBufs = scratchPool.Get().(*scratchBufs) }

// giveBack returns them.
func (sc *scratch) giveBack() {
	scratchPool.Put(sc.scratchBufs)
	sc.scratchBufs = nil
}

// state returns empty slices to build a new acknowledged state in, for
// ackedSet.rewrite to copy; done must be called after.
func (sc *scratch) state(n int) ([]name, []uint64, []int32) {
	return slices.Grow(sc.names[:0], n), slices.Grow(sc.hashes[:0], n), sc.fresh[:0]
}

// done keeps the slices a pass built for the next one, without the names,
// which must not be kept alive.
func (sc *scratch) done(names []name, hashes []uint64, fresh []int32) {
	clear(names)
	sc.names, sc.hashes, sc.fresh = names[:0], hashes[:0], fresh[:0]
}

// marksFor returns n zeroed marks, one per position of the set a pass walks.
func (sc *scratch) marksFor(n int) []int32 {
	if cap(sc.marks) < n {
		sc.marks = make([]int32, n, n+n/4)
	}
	m := sc.marks[:n]
	clear(m)
	return m
}

// placedNames indexes the names a pass adds to a set that did not hold
// them, to find the rare one a push lists twice. It is an open-addressing
// table with linear probing, at most three quarters full, keyed by the
// names' handles: a stream's first push adds every name, and a map made for
// it was most of the garbage of a stream's sync; at most half full, the
// table of a sidecar's first push of 40,000 clusters was 2 MB at the push's
// peak rather than 1.
type placedNames struct {
	slots []placedSlot // all free between passes
}

type placedSlot struct {
	n   name // the zero name for a free slot
	pos int32
}

var placedSeed = maphash.MakeSeed()

// added returns an empty index with room for n names; done must be called
// once the pass is over.
func (sc *scratch) added(n int) *placedNames {
	t := &sc.placed
	size := 16
	for size < n+n/3 {
		size *= 2
	}
	if cap(t.slots) < size {
		t.slots = make([]placedSlot, size)
	}
	t.slots = t.slots[:size] // free: done cleared what the last pass used
	return t
}

// find returns the position n was added at.
func (t *placedNames) find(n name) (int32, bool) {
	mask := uint64(len(t.slots) - 1)
	for i := maphash.Comparable(placedSeed, n) & mask; ; i = (i + 1) & mask {
		switch s := &t.slots[i]; s.n {
		case n:
			return s.pos, true
		case name{}:
			return 0, false
		}
	}
}

// add records that n, which find did not find, was added at pos; at most
// the n names added asked for.
func (t *placedNames) add(n name, pos int32) {
	mask := uint64(len(t.slots) - 1)
	i := maphash.Comparable(placedSeed, n) & mask
	for t.slots[i].n != (name{}) {
		i = (i + 1) & mask
	}
	t.slots[i] = placedSlot{n: n, pos: pos}
}

// done frees the slots, letting go of the names.
func (t *placedNames) done() { clear(t.slots) }
