package inspect

import (
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"

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

// activeBisection is a bisection under way with a client.
type activeBisection struct {
	ts *typeServe
	// set is the rejected push's resources, as indexes into ts's.
	set []int
	b   *bisector
	// nonce is the push of the round under way.
	nonce string
	// first is what the NACK that started it rejected; last what the
	// latest round the client rejected did.
	first, last *origin.Rejection
}

// names are the names of the resources at idx, indexes into set.
func (a *activeBisection) names(idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = a.ts.st.Resources[a.set[j]].Name
	}
	return out
}

// startBisection bisects what the NACK e rejected; done says there was
// nothing to bisect: the push held one resource.
func (s *session) startBisection(ts *typeServe, e track.PushEnded) (done bool, err error) {
	a := &activeBisection{ts: ts, set: ts.last, first: origin.Of(e.Rejected)}
	label := typeLabel(ts.st.TypeURL)
	if len(a.set) <= 1 {
		s.log.Info(fmt.Sprintf("bisect %s: the rejected push holds %s: nothing to bisect", label, plural(len(a.set), "resource", "resources")))
		all := make([]int, len(a.set))
		for i := range all {
			all[i] = i
		}
		s.finishBisection(a, all, e.Error, a.first, 0, false)
		return true, nil
	}
	most := int(math.Ceil(math.Log2(float64(len(a.set))))) + 1
	s.log.Info(fmt.Sprintf("bisect %s: pushing parts of the %d resources the client rejected, at most %d rounds for one bad resource", label, len(a.set), most))
	a.b = newBisector(len(a.set), e.Error)
	s.bis = a
	return s.nextRound(a)
}

// nextRound pushes the bisection's next part, or ends it.
func (s *session) nextRound(a *activeBisection) (done bool, err error) {
	part, ok := a.b.next()
	if !ok {
		found := a.b.culprit
		rejection := a.first
		if len(found) < len(a.set) {
			rejection = a.last
		}
		s.finishBisection(a, found, a.b.message, rejection, a.b.rounds, a.b.inconsistent)
		// The client holds a part: give it back the whole set, as the
		// capture has it (an Envoy's config dump then shows that, and a
		// grpc-go client does not take every cluster it lost for gone
		// when the replay ends).
		nonce, err := s.push(a.ts, a.ts.st.Version, a.set, nil)
		if err != nil {
			return false, err
		}
		s.quiet[nonce] = true
		s.restoring = nonce
		return false, nil
	}
	idx := make([]int, len(part))
	in := map[int]bool{}
	for i, j := range part {
		idx[i] = a.set[j]
		in[j] = true
	}
	var removed []string
	if s.delta {
		// The client keeps in Delta what a push does not name: the rest
		// of the rejected set goes, so that it holds this part alone.
		for j := range a.set {
			if !in[j] {
				removed = append(removed, a.ts.st.Resources[a.set[j]].Name)
			}
		}
	}
	nonce, err := s.push(a.ts, fmt.Sprintf("%s/bisect-%d", a.ts.st.Version, a.b.rounds), idx, removed)
	if err != nil {
		return false, err
	}
	s.quiet[nonce] = true
	a.nonce = nonce
	return false, nil
}

// round takes the client's answer to a bisection's round.
func (s *session) round(a *activeBisection, e track.PushEnded) (done bool, err error) {
	if e.Result != track.ResultACK && e.Result != track.ResultNACK {
		return false, fmt.Errorf("%w ended round %d of the %s bisection as %s", errClient, a.b.rounds, typeLabel(a.ts.st.TypeURL), e.Result)
	}
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
	s.log.Info(fmt.Sprintf("bisect %s round %d: %d of %d resources (%s): %s", typeLabel(a.ts.st.TypeURL), a.b.rounds, len(names), len(a.set), span, strings.ToUpper(string(e.Result))))
	return s.nextRound(a)
}

// finishBisection says what the bisection found and keeps it for the outcome.
func (s *session) finishBisection(a *activeBisection, found []int, message string, rejection *origin.Rejection, rounds int, inconsistent bool) {
	label := typeLabel(a.ts.st.TypeURL)
	res := &Bisection{TypeURL: a.ts.st.TypeURL, Of: len(a.set), Rounds: rounds, Culprit: a.names(found), Message: message, Inconsistent: inconsistent}
	if rejection != nil {
		res.Objects = rejection.Objects()
		res.Source = rejection.Summary()
	}
	if inconsistent {
		s.log.Warn(fmt.Sprintf("bisect %s: after %d rounds the client takes every part it rejected before: its verdicts depend on more than these resources (its own state, or the order of pushes); the last part it rejected: %s",
			label, rounds, listSome(res.Culprit)))
	} else {
		s.log.Warn(fmt.Sprintf("bisect %s: after %d rounds, the client rejects %d of the %d resources on %s: %s",
			label, rounds, len(found), len(a.set), map[bool]string{true: "its own", false: "their own"}[len(found) == 1], listSome(res.Culprit)))
	}
	if res.Source != "" {
		s.log.Warn("  source: " + res.Source)
	}
	for _, o := range res.Objects {
		s.log.Warn("    " + o.Kubectl())
	}
	s.log.Warn("  message: " + message)
	s.mu.Lock()
	s.result = res
	s.mu.Unlock()
	s.bis = nil
}

// candidates are the resources the fault is known to be among so far, as
// indexes into the set.
func (a *activeBisection) candidates() []int { return a.b.suspects }
