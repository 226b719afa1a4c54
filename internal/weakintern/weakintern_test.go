package weakintern_test

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/weakintern"
)

type list struct{ vals []int }

func get(s *weakintern.Store[list], sum uint64, vals []int) *list {
	return s.Get(sum, func(l *list) bool { return slices.Equal(l.vals, vals) },
		func() *list { return &list{vals: slices.Clone(vals)} })
}

func TestEqualValuesAreHeldOnce(t *testing.T) {
	leakcheck.Check(t)
	var s weakintern.Store[list]
	a := get(&s, 1, []int{1, 2, 3})
	tests := []struct {
		name string
		sum  uint64
		vals []int
		same bool
	}{
		{"equal", 1, []int{1, 2, 3}, true},
		{"same sum, other content", 1, []int{3, 2, 1}, false},
		{"other sum", 2, []int{1, 2, 3}, false},
	}
	for _, tt := range tests {
		if got := get(&s, tt.sum, tt.vals); (got == a) != tt.same {
			t.Errorf("%s: got the first value %v, want %v", tt.name, got == a, tt.same)
		}
	}
	runtime.KeepAlive(a)
}

func TestValuesNoOneHoldsAreLetGo(t *testing.T) {
	leakcheck.Check(t)
	var s weakintern.Store[list]
	for i := range 100 {
		get(&s, uint64(i%7), []int{i})
	}
	if got := s.Len(); got != 100 {
		t.Fatalf("the store holds %d entries of 100 values just stored", got)
	}
	// Cleanups run after a collection, on the runtime's goroutine: collect
	// until they did, within a bound that only a lost cleanup reaches.
	deadline := time.Now().Add(10 * time.Second)
	for s.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the store keeps %d entries of values no one holds", s.Len())
		}
		runtime.GC()
		runtime.Gosched()
	}
}
