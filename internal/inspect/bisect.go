package inspect

import (
	"iter"
	"slices"
)

// bisector narrows a set of resources a client rejected down to the
// smallest part of it the client still rejects, asking the client one part
// at a time: the caller pushes each part next returns, and sets answer to
// the client's before it asks for the next.
//
// One bad resource among n is found in ⌈log₂ n⌉ rounds, plus one to
// confirm it when the last half was inferred rather than pushed: each round
// pushes one half; when the client takes it, the fault is in the other half,
// which is not pushed to find that out. When the confirmation fails, the
// fault needs several resources together (one refers to another, two share
// a name), and a search that pushes both halves and keeps one half fixed
// while it narrows the other finds every resource it needs.
type bisector struct {
	n int
	// answer is the client's answer to the part next returned last.
	answer verdict
	next   func() ([]int, bool)
	stop   func()

	rounds int
	// last is the last part pushed and its answer.
	last        []int
	lastVerdict verdict

	// Culprit is the smallest part found, as indexes into the set; Message
	// is what the client said of it. Inconsistent is set when the client
	// accepted the part it had rejected before.
	culprit      []int
	message      string
	inconsistent bool
}

// verdict is the client's answer to one part.
type verdict struct {
	rejected bool
	message  string
}

// newBisector bisects a set of n resources the client rejected with
// message.
func newBisector(n int, message string) *bisector {
	b := &bisector{n: n, message: message}
	b.next, b.stop = iter.Pull(b.search)
	return b
}

// halves splits set in two, the first half the larger.
func halves(set []int) (a, b []int) {
	mid := (len(set) + 1) / 2
	return set[:mid], set[mid:]
}

func (b *bisector) search(yield func([]int) bool) {
	test := func(part []int) (verdict, bool) {
		b.rounds++
		if !yield(part) {
			return verdict{}, false
		}
		b.last, b.lastVerdict = part, b.answer
		return b.answer, true
	}
	all := make([]int, b.n)
	for i := range all {
		all[i] = i
	}
	set, verified, message := all, true, b.message
	for len(set) > 1 {
		first, second := halves(set)
		v, ok := test(first)
		if !ok {
			return
		}
		if v.rejected {
			set, verified, message = first, true, v.message
			continue
		}
		set, verified = second, false
	}
	if !verified {
		v, ok := test(set)
		if !ok {
			return
		}
		if !v.rejected {
			// No one resource alone: find every one the fault needs.
			found, ok := b.minimize(test, nil, all)
			if !ok {
				return
			}
			set = found
			if !slices.Equal(b.last, set) {
				if v, ok = test(set); !ok {
					return
				}
			}
			v = b.lastVerdict
			if !v.rejected {
				b.inconsistent = true
			}
		}
		message = v.message
	}
	b.culprit, b.message = set, message
}

// minimize returns the smallest part of set that, pushed with base, the
// client rejects, given that it rejects base and set together.
func (b *bisector) minimize(test func([]int) (verdict, bool), base, set []int) ([]int, bool) {
	if len(set) <= 1 {
		return set, true
	}
	first, second := halves(set)
	for _, half := range [][]int{first, second} {
		v, ok := test(union(base, half))
		if !ok {
			return nil, false
		}
		if v.rejected {
			return b.minimize(test, base, half)
		}
	}
	// Each half is taken alone: the fault needs something of both.
	a, ok := b.minimize(test, union(base, second), first)
	if !ok {
		return nil, false
	}
	c, ok := b.minimize(test, union(base, a), second)
	if !ok {
		return nil, false
	}
	return union(a, c), true
}

func union(a, b []int) []int {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
