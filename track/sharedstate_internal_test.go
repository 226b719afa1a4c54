package track

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func ackedOf(t *testing.T, prefix string, n int) ackedSet {
	t.Helper()
	var a ackedSet
	for i := range n {
		a.add(intern(fmt.Appendf(nil, "%s%d", prefix, i)), uint64(i)*7919+1)
	}
	return a
}

// TestAckedStatesAreSharedByContent holds two streams' states to one copy
// when they are the same at a tick, and to their own when one of them
// changes: a change works on a copy, and the other stream still reads what
// it had.
func TestAckedStatesAreSharedByContent(t *testing.T) {
	leakcheck.Check(t)
	a, b := ackedOf(t, "outbound|80||s", 100), ackedOf(t, "outbound|80||s", 100)
	a.share()
	b.share()
	if a.shared == nil || a.shared != b.shared || unsafe.SliceData(a.names) != unsafe.SliceData(b.names) || unsafe.SliceData(a.hashes) != unsafe.SliceData(b.hashes) {
		t.Fatalf("two streams with the same state hold %p and %p", a.shared, b.shared)
	}
	want := slices.Clone(b.hashes)

	a.own()
	a.hashes[3] = 42
	a.add(intern([]byte("outbound|80||new")), 43)
	a.share()
	if a.shared == nil || a.shared == b.shared {
		t.Fatalf("a changed state is %p, the unchanged one %p", a.shared, b.shared)
	}
	if !slices.Equal(b.hashes, want) || len(b.names) != 100 {
		t.Fatalf("the unchanged stream's state moved with the other's change: %d names, hash 3 %d", len(b.names), b.hashes[3])
	}
	if got := a.findString("outbound|80||new", -1); got != 100 || a.hashes[3] != 42 {
		t.Fatalf("the changed state finds its new name at %d with hash 3 %d", got, a.hashes[3])
	}
	// A small state stays the stream's own.
	c := ackedOf(t, "x", sharedFrom-1)
	c.share()
	if c.shared != nil {
		t.Fatalf("a state of %d names is shared", len(c.names))
	}
}

// TestSharedStatesGoWithTheirStreams lets go of every stream holding a
// state: its entry in the store goes once it is collected.
func TestSharedStatesGoWithTheirStreams(t *testing.T) {
	leakcheck.Check(t)
	a := ackedOf(t, "gone-", 50)
	sum := ackedStates.sum(a.names, a.hashes)
	a.share()
	if !ackedStates.lists.Holds(sum) {
		t.Fatal("a shared state is not in the store")
	}
	a = ackedSet{}
	// The cleanup runs after a collection, on the runtime's goroutine:
	// collect until it did, within a bound that only a lost entry reaches.
	deadline := time.Now().Add(10 * time.Second)
	for ackedStates.lists.Holds(sum) {
		if time.Now().After(deadline) {
			t.Fatal("the store kept the entry of a state no stream holds")
		}
		runtime.GC()
		runtime.Gosched()
	}
}
