package replay

import (
	"fmt"
	"iter"
	"log/slog"
	"math"
	"slices"
	"strings"

	"github.com/adstap/adstap/internal/inspect"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
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
	// parts are the parts pushed, in order; suspects the part the fault is
	// known to be in so far.
	parts    [][]int
	suspects []int
	// last is the last part answered and its answer.
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
		b.parts = append(b.parts, part)
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
		b.suspects = set
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
	b.suspects = set
	if !verified {
		v, ok := test(set)
		if !ok {
			return
		}
		if !v.rejected {
			// No one resource alone: find every one the fault needs.
			b.suspects = all
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

// Bisection is what a bisection found.
type Bisection struct {
	TypeURL string
	Of      int // the resources of the rejected push
	Rounds  int
	// Culprit is the smallest set of resources the client still rejects,
	// Objects the Istio objects they record, Message what the client said
	// of them alone.
	Culprit []string
	Objects []origin.Object
	Source  string
	Message string
	// Inconsistent is set when the client accepted, in the end, what it
	// had rejected: its verdicts depend on more than the resources.
	Inconsistent bool
}

// bisection is a bisection under way with a client, of the latest push of
// one type, which the client rejected: it says what to push each round and
// what it found, and says so in the log; the session pushes each round and
// hands it the client's answer.
type bisection struct {
	log   *slog.Logger
	st    *inspect.SentType
	delta bool
	// set is the rejected push's resources, as indexes into st's.
	set []int
	b   *bisector
	// nonce is the push of the round under way.
	nonce string
	// first is what the NACK that started it rejected; last what the
	// latest round the client rejected did.
	first, last *origin.Rejection
}

// round is what to push in one round of a bisection: the resources idx
// (indexes into the type's) as version, and in Delta the removal of the
// names in removed.
type round struct {
	version string
	idx     []int
	removed []string
}

// newBisection bisects the resources set (indexes into st's) of the push
// the NACK e rejected. With one resource or none there is nothing to
// bisect: it returns no bisection and, at once, what it found.
func newBisection(log *slog.Logger, st *inspect.SentType, set []int, delta bool, e track.PushEnded) (*bisection, *Bisection) {
	a := &bisection{log: log, st: st, delta: delta, set: set, first: origin.Of(e.Rejected)}
	label := typeLabel(st.TypeURL)
	if len(a.set) <= 1 {
		log.Info(fmt.Sprintf("bisect %s: the rejected push holds %s: nothing to bisect", label, plural(len(a.set), "resource", "resources")))
		all := make([]int, len(a.set))
		for i := range all {
			all[i] = i
		}
		return nil, a.finish(all, e.Error, a.first, 0, false)
	}
	most := int(math.Ceil(math.Log2(float64(len(a.set))))) + 1
	log.Info(fmt.Sprintf("bisect %s: pushing parts of the %d resources the client rejected, at most %d rounds for one bad resource", label, len(a.set), most))
	a.b = newBisector(len(a.set), e.Error)
	return a, nil
}

// next is the round to push next or, once the bisection is over, what it
// found (non-nil), and the round is not to be pushed.
func (a *bisection) next() (round, *Bisection) {
	part, ok := a.b.next()
	if !ok {
		found := a.b.culprit
		rejection := a.first
		if len(found) < len(a.set) {
			rejection = a.last
		}
		return round{}, a.finish(found, a.b.message, rejection, a.b.rounds, a.b.inconsistent)
	}
	r := round{version: fmt.Sprintf("%s/bisect-%d", a.st.Version, a.b.rounds), idx: make([]int, len(part))}
	in := map[int]bool{}
	for i, j := range part {
		r.idx[i] = a.set[j]
		in[j] = true
	}
	if a.delta {
		// The client keeps in Delta what a push does not name: the rest
		// of the rejected set goes, so that it holds this part alone.
		for j := range a.set {
			if !in[j] {
				r.removed = append(r.removed, a.st.Resources[a.set[j]].Name)
			}
		}
	}
	return r, nil
}

// answer takes the client's answer to the round under way: an ACK or a
// NACK.
func (a *bisection) answer(e track.PushEnded) {
	rejected := e.Result == track.ResultNACK
	a.b.answer = verdict{rejected: rejected, message: e.Error}
	if rejected {
		a.last = origin.Of(e.Rejected)
	}
	names := a.names(a.b.parts[len(a.b.parts)-1])
	span := names[0]
	if len(names) > 1 {
		span += " … " + names[len(names)-1]
	}
	a.log.Info(fmt.Sprintf("bisect %s round %d: %d of %d resources (%s): %s", typeLabel(a.st.TypeURL), a.b.rounds, len(names), len(a.set), span, strings.ToUpper(string(e.Result))))
}

// finish says what the bisection found, and returns it.
func (a *bisection) finish(found []int, message string, rejection *origin.Rejection, rounds int, inconsistent bool) *Bisection {
	label := typeLabel(a.st.TypeURL)
	res := &Bisection{TypeURL: a.st.TypeURL, Of: len(a.set), Rounds: rounds, Culprit: a.names(found), Message: message, Inconsistent: inconsistent}
	if rejection != nil {
		res.Objects = rejection.Objects()
		res.Source = rejection.Summary()
	}
	if inconsistent {
		a.log.Warn(fmt.Sprintf("bisect %s: after %d rounds the client takes every part it rejected before: its verdicts depend on more than these resources (its own state, or the order of pushes); the last part it rejected: %s",
			label, rounds, listSome(res.Culprit)))
	} else {
		a.log.Warn(fmt.Sprintf("bisect %s: after %d rounds, the client rejects %d of the %d resources on %s: %s",
			label, rounds, len(found), len(a.set), map[bool]string{true: "its own", false: "their own"}[len(found) == 1], listSome(res.Culprit)))
	}
	if res.Source != "" {
		a.log.Warn("  source: " + res.Source)
	}
	for _, o := range res.Objects {
		a.log.Warn("    " + o.Kubectl())
	}
	a.log.Warn("  message: " + message)
	return res
}

// names are the names of the resources at idx, indexes into set.
func (a *bisection) names(idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = a.st.Resources[a.set[j]].Name
	}
	return out
}

// candidates are the resources the fault is known to be among so far, as
// indexes into the set.
func (a *bisection) candidates() []int { return a.b.suspects }
