package replay

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// runBisector answers the bisector's parts with rejects until it is done,
// and returns how many parts it pushed.
func runBisector(t *testing.T, n int, rejects func(part []int) bool) *bisector {
	t.Helper()
	b := newBisector(n, "whole set rejected")
	defer b.stop()
	for {
		part, ok := b.next()
		if !ok {
			return b
		}
		if len(part) == 0 {
			t.Fatalf("round %d pushes nothing", b.rounds)
		}
		r := rejects(part)
		b.answer = verdict{rejected: r, message: fmt.Sprintf("rejected %v", part)}
		if b.rounds > 4*n {
			t.Fatalf("no end after %d rounds", b.rounds)
		}
	}
}

func TestBisectorFindsOneBadResourceInLogRounds(t *testing.T) {
	leakcheck.Check(t)
	for _, n := range []int{1, 2, 3, 7, 1000} {
		most := int(math.Ceil(math.Log2(float64(max(n, 1))))) + 1
		for bad := range n {
			b := runBisector(t, n, func(part []int) bool { return slices.Contains(part, bad) })
			if !slices.Equal(b.culprit, []int{bad}) || b.inconsistent {
				t.Fatalf("n=%d bad=%d: culprit %v (inconsistent %v)", n, bad, b.culprit, b.inconsistent)
			}
			if b.rounds > most {
				t.Errorf("n=%d bad=%d: %d rounds, want at most %d", n, bad, b.rounds, most)
			}
			if want := fmt.Sprintf("rejected [%d]", bad); n > 1 && b.message != want {
				t.Errorf("n=%d bad=%d: message %q, want the client's words for the culprit alone, %q", n, bad, b.message, want)
			}
		}
	}
}

func TestBisectorFindsEveryResourceAFaultNeeds(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		n    int
		need []int
	}{
		{n: 8, need: []int{1, 6}},
		{n: 1000, need: []int{3, 998}},
		{n: 100, need: []int{10, 11}},
		{n: 64, need: []int{0, 31, 63}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.need), func(t *testing.T) {
			b := runBisector(t, tt.n, func(part []int) bool {
				for _, x := range tt.need {
					if !slices.Contains(part, x) {
						return false
					}
				}
				return true
			})
			if !slices.Equal(b.culprit, tt.need) || b.inconsistent {
				t.Errorf("culprit %v (inconsistent %v), want %v", b.culprit, b.inconsistent, tt.need)
			}
			t.Logf("%d resources, fault needs %v: %d rounds", tt.n, tt.need, b.rounds)
		})
	}
}

func TestBisectorSaysWhenTheClientChangesItsMind(t *testing.T) {
	leakcheck.Check(t)
	b := runBisector(t, 16, func([]int) bool { return false })
	if !b.inconsistent {
		t.Errorf("a client that takes every part is not reported: culprit %v", b.culprit)
	}
}

func TestBisectorStopsWhenAsked(t *testing.T) {
	leakcheck.Check(t)
	b := newBisector(100, "")
	if _, ok := b.next(); !ok {
		t.Fatal("no first round")
	}
	b.stop()
	if _, ok := b.next(); ok {
		t.Error("a round after stop")
	}
	if b.culprit != nil {
		t.Errorf("a stopped bisection has a culprit: %v", b.culprit)
	}
}
