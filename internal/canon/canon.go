// Package canon keeps one copy of each distinct name for the whole process, as unique does for strings, in half its memory.
package canon

import (
	"hash/maphash"
	"sync"
	"unsafe"
	"weak"
)

// Name is a name interned process-wide: two Names are equal exactly when
// their text is, so comparing them costs a pointer comparison. The zero
// Name is no name; its Value is "".
//
// It is what unique.Handle[string] is, at about two thirds of the memory:
// a sidecar synced on 40,000 clusters holds every cluster's name in the
// tracker and the reference check, and unique spent some 260 bytes on
// each in RSS (the string, a separate header, a node of its trie, a weak
// pointer) against about 200 here (one block for header and bytes, a weak
// pointer, a slot in a map).
type Name struct{ p *string }

// Value returns the name.
func (n Name) Value() string {
	if n.p == nil {
		return ""
	}
	return *n.p
}

// shardCount spreads the table so that streams interning at once seldom
// meet on a lock.
const shardCount = 64

// shard holds the names whose hash falls in it, weakly: a name no Name
// refers to any more is collected, and its entry is swept out later.
type shard struct {
	mu sync.Mutex
	m  map[uint64]weak.Pointer[string]
	// more holds the names whose hash another live name in m has: 64-bit
	// hashes of distinct names collide so seldom that a list is enough.
	more map[uint64][]weak.Pointer[string]
	// added counts the entries added since the last sweep, and live those
	// the sweep left: once a shard has added as many as it then held, it
	// sweeps again, so the collected names' entries cost at most as much
	// as the live ones, and a sweep costs a constant per name added.
	added, live int
}

var (
	seed  = maphash.MakeSeed()
	table [shardCount]shard
	// hashOf is the table's hash; a variable so that a test can make
	// every name collide.
	hashOf = func(s string) uint64 { return maphash.String(seed, s) }
)

// Make returns the Name of s.
func Make(s string) Name {
	return Name{intern(s)}
}

// MakeBytes returns the Name b spells, copying b only when
// the name is new.
func MakeBytes(b []byte) Name {
	return Name{intern(unsafe.String(unsafe.SliceData(b), len(b)))}
}

// intern finds s or stores a copy of it. s may be a view of bytes the
// caller is about to change: only the copy is kept.
func intern(s string) *string {
	h := hashOf(s)
	sh := &table[h%shardCount]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	w, ok := sh.m[h]
	if ok {
		if p := w.Value(); p != nil && *p == s {
			return p
		} else if p == nil {
			// Collected: the slot is free for s.
			ok = false
		}
	}
	for _, w := range sh.more[h] {
		if p := w.Value(); p != nil && *p == s {
			return p
		}
	}
	p := newName(s)
	if sh.m == nil {
		sh.m = make(map[uint64]weak.Pointer[string])
	}
	if ok {
		if sh.more == nil {
			sh.more = make(map[uint64][]weak.Pointer[string])
		}
		sh.more[h] = append(sh.more[h], weak.Make(p))
	} else {
		sh.m[h] = weak.Make(p)
	}
	sh.added++
	if sh.added > max(sh.live, 256) {
		sh.sweep()
	}
	return p
}

// sweep drops the entries of collected names.
func (sh *shard) sweep() {
	for h, w := range sh.m {
		if w.Value() == nil {
			delete(sh.m, h)
		}
	}
	live := len(sh.m)
	for h, ws := range sh.more {
		n := 0
		for _, w := range ws {
			if w.Value() != nil {
				ws[n] = w
				n++
			}
		}
		clear(ws[n:])
		if n == 0 {
			delete(sh.more, h)
		} else {
			sh.more[h] = ws[:n]
		}
		live += n
	}
	sh.live, sh.added = live, 0
}

// newName copies s into one block that holds both the string's header and
// its bytes, and returns the header. A string and a separate header to
// point a weak pointer at cost two allocations and a size class's rounding
// twice. The block is a []byte, which the collector does not scan: the
// only pointer in it is the header's to its own bytes, which keeps nothing
// alive that the block does not.
func newName(s string) *string {
	// The header alone is 16 bytes, too large for the tiny allocator,
	// which packs smaller pointer-free blocks together: a weak pointer to
	// one of those would keep the others.
	const header = int(unsafe.Sizeof(""))
	block := make([]byte, header+len(s))
	p := (*string)(unsafe.Pointer(unsafe.SliceData(block)))
	if len(s) > 0 {
		copy(block[header:], s)
		*p = unsafe.String(&block[header], len(s))
	}
	return p
}

// Len returns the number of entries the table holds, collected names'
// included until a sweep drops them.
func Len() int {
	n := 0
	for i := range table {
		sh := &table[i]
		sh.mu.Lock()
		n += len(sh.m)
		for _, ws := range sh.more {
			n += len(ws)
		}
		sh.mu.Unlock()
	}
	return n
}
