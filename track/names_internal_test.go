package track

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/cespare/xxhash/v2"
	"github.com/google/go-cmp/cmp"
)

// checkSet verifies a nameSet's invariants: distinct names, and an index, if
// any, that finds each of them and holds nothing else.
func checkSet(t *testing.T, what string, s *nameSet) {
	t.Helper()
	seen := make(map[name]int)
	for i, n := range s.names {
		if j, dup := seen[n]; dup {
			t.Fatalf("%s: %q at %d and %d", what, n.Value(), j, i)
		}
		seen[n] = i
	}
	if s.slots == nil {
		return
	}
	used := 0
	for _, v := range s.slots {
		if v != 0 {
			used++
		}
	}
	if used != len(s.names) || 2*used > len(s.slots) {
		t.Fatalf("%s: %d slots of %d used for %d names", what, used, len(s.slots), len(s.names))
	}
	for i, n := range s.names {
		if got := s.findString(n.Value(), -1); got != i {
			t.Fatalf("%s: %q found at %d, want %d", what, n.Value(), got, i)
		}
	}
}

// keyings are the index keys the set tests run under: real ones, every name
// on one of three keys at the start of the table, and at its end, so that
// runs of colliding entries wrap around.
var keyings = []struct {
	name    string
	collide func() (undo func())
}{
	{"xxhash", func() func() { return func() {} }},
	{"collide", CollideNames},
	{"collide-wrapping", func() func() {
		k, ks := nameKey, nameKeyString
		nameKey = func(b []byte) uint64 { return 0xffffffff - uint64(len(b)%3) }
		nameKeyString = func(s string) uint64 { return 0xffffffff - uint64(len(s)%3) }
		return func() { nameKey, nameKeyString = k, ks }
	}},
}

// TestNameSet runs random finds, additions, removals and rewrites against a
// map, checking the index after every step.
func TestNameSet(t *testing.T) {
	leakcheck.Check(t)
	for _, keying := range keyings {
		t.Run(keying.name, func(t *testing.T) {
			defer keying.collide()()
			r := rand.New(rand.NewPCG(1, 2))
			var a ackedSet
			want := map[string]uint64{}
			for step := range 4000 {
				str := fmt.Sprintf("n%d", r.IntN(80))
				k := a.findString(str, r.IntN(len(a.names)+2)-1)
				if _, in := want[str]; (k >= 0) != in {
					t.Fatalf("step %d: find(%q) = %d, in set: %v", step, str, k, in)
				}
				if k >= 0 && a.names[k].Value() != str {
					t.Fatalf("step %d: find(%q) = %d, which holds %q", step, str, k, a.names[k].Value())
				}
				if kb := a.findBytes([]byte(str), -1); kb != k {
					t.Fatalf("step %d: findBytes(%q) = %d, findString %d", step, str, kb, k)
				}
				if kn := a.findName(intern([]byte(str)), -1); kn != k {
					t.Fatalf("step %d: findName(%q) = %d, findString %d", step, str, kn, k)
				}
				switch op := r.IntN(20); {
				case op == 0: // a rewrite: some names dropped, the rest moved, some added
					where := make([]int32, len(a.names))
					var names []name
					var hashes []uint64
					for _, p := range r.Perm(len(a.names)) {
						if r.IntN(4) == 0 {
							delete(want, a.names[p].Value())
							continue
						}
						names = append(names, a.names[p])
						hashes = append(hashes, a.hashes[p])
						where[p] = int32(len(names))
					}
					var fresh []int32
					for range r.IntN(6) {
						str := fmt.Sprintf("n%d", r.IntN(80))
						if _, in := want[str]; in {
							continue
						}
						want[str] = uint64(step)
						fresh = append(fresh, int32(len(names)))
						names = append(names, intern([]byte(str)))
						hashes = append(hashes, uint64(step))
					}
					a.own()
					a.rewrite(names, hashes, where, fresh)
				case k < 0:
					a.own() // as every change does: a rewrite may have shared the set
					a.add(intern([]byte(str)), uint64(step))
					want[str] = uint64(step)
				case op < 10:
					a.own()
					a.removeAt(k)
					delete(want, str)
				}
				checkSet(t, fmt.Sprintf("step %d", step), &a.nameSet)
				got := map[string]uint64{}
				for i, n := range a.names {
					got[n.Value()] = a.hashes[i]
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("step %d: set (-want +got):\n%s", step, diff)
				}
			}
		})
	}
}

// TestAgainstReference plays random requests, pushes and answers, in SotW
// and Delta, with names in stable, perturbed and random orders, duplicates,
// heartbeats and removals, through a typeState and through the map-based
// reference, and requires the same diffs, full syncs, subscription results
// and states; with real keys and with every name colliding.
func TestAgainstReference(t *testing.T) {
	leakcheck.Check(t)
	for _, keying := range keyings {
		for _, url := range []string{codec.TypeCluster, codec.TypeEndpoint} {
			for _, delta := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/delta=%v/%s", codec.ShortType(url), delta, keying.name), func(t *testing.T) {
					defer keying.collide()()
					for seed := range uint64(150) {
						playAgainstReference(t, seed, url, delta)
					}
				})
			}
		}
	}
}

func playAgainstReference(t *testing.T, seed uint64, url string, delta bool) {
	r := rand.New(rand.NewPCG(seed, 7))
	pool := make([]string, 10+r.IntN(30))
	for i := range pool {
		pool[i] = fmt.Sprintf("outbound|%d||svc-%d.ns.svc", 8000+r.IntN(3), i)
	}
	pool[0] = "" // what the decoder gives a resource it finds no name in
	cfg := Config{MaxNames: 1 + r.IntN(6)}.withDefaults()
	method := "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	if delta {
		method = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
	}
	s := newStream(StreamMeta{ID: 1, Method: method}, &keeper{})
	s.sc.borrow()
	defer s.sc.giveBack()
	ts := s.typeFor(url)
	ref := newRefState(url)
	pending := false
	at := time.Unix(0, 0)
	some := func(n int) []string {
		out := make([]string, 0, n)
		for range n {
			out = append(out, pool[r.IntN(len(pool))])
		}
		return out
	}
	// current is what the new state holds, in its order: pushes often
	// follow it, as control planes do.
	current := func() []string {
		var out []string
		for _, n := range ts.acked.names {
			out = append(out, n.Value())
		}
		return out
	}
	for step := range 60 {
		at = at.Add(time.Millisecond)
		where := fmt.Sprintf("seed %d step %d", seed, step)
		switch op := r.IntN(10); {
		case op < 2: // a request
			req := &codec.Request{Delta: delta, TypeURL: url}
			if delta {
				req.Subscribe = some(r.IntN(4))
				req.Unsubscribe = some(r.IntN(3))
				if r.IntN(8) == 0 {
					req.Subscribe = append(req.Subscribe, "*")
				}
			} else {
				switch r.IntN(4) {
				case 0:
					req.ResourceNames = current()
				case 1:
					req.ResourceNames = append(current(), some(r.IntN(3))...)
				default:
					req.ResourceNames = some(r.IntN(12))
				}
				if r.IntN(10) == 0 {
					req.ResourceNames = append(req.ResourceNames, "*")
				}
			}
			c := ts.classify(req, s.sc)
			changed, unsubscribed := ref.request(req)
			if c.changed != changed || (c.kind == KindUnsubscribe) != unsubscribed {
				t.Fatalf("%s: request %+v: changed %v unsubscribed %v, want %v %v",
					where, req, c.changed, c.kind == KindUnsubscribe, changed, unsubscribed)
			}
		case op < 7: // a push
			resp := randomPush(r, url, delta, current(), pool)
			ts.send(s, at, resp, 0, &cfg, nil)
			if pending {
				ref.apply()
			}
			pending = true
			d, full := ref.push(resp, cfg.MaxNames)
			got := struct {
				Diff Diff
				Full bool
			}{ts.p.ev.Diff, ts.p.ev.FullSync}
			want := struct {
				Diff Diff
				Full bool
			}{d, full}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s: push %s (-want +got):\n%s", where, describeResp(resp), diff)
			}
			for i := range resp.Resources {
				for j := range resp.Resources[i].Name {
					resp.Resources[i].Name[j] = 0xff // the tracker must keep no views
				}
			}
		default: // an answer
			if !pending {
				continue
			}
			req := &codec.Request{Delta: delta, TypeURL: url, ResponseNonce: ts.p.ev.Nonce}
			if r.IntN(4) == 0 {
				req.ErrorDetail = &codec.ErrorDetail{Message: "rejected " + pool[r.IntN(len(pool))]}
			} else {
				ref.apply()
			}
			ts.answer(s, at, req, cfg.MaxNames, nil)
			pending = false
		}
		compareStates(t, where, ts, ref)
	}
}

func randomPush(r *rand.Rand, url string, delta bool, current, pool []string) *codec.Response {
	var names []string
	switch r.IntN(4) {
	case 0, 1: // the state's order, perturbed
		names = slices.Clone(current)
		for range r.IntN(3) {
			switch len(names) {
			case 0:
				names = append(names, pool[r.IntN(len(pool))])
				continue
			}
			i := r.IntN(len(names))
			switch r.IntN(4) {
			case 0:
				names = slices.Insert(names, i, pool[r.IntN(len(pool))])
			case 1:
				names = slices.Delete(names, i, i+1)
			case 2:
				j := r.IntN(len(names))
				names[i], names[j] = names[j], names[i]
			case 3:
				names = slices.Insert(names, i, names[r.IntN(len(names))]) // listed twice
			}
		}
	case 2: // another order
		names = slices.Clone(current)
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	default:
		for range r.IntN(len(pool)) {
			names = append(names, pool[r.IntN(len(pool))])
		}
	}
	resp := &codec.Response{Delta: delta, TypeURL: url, VersionInfo: "v", Nonce: fmt.Sprint(r.Uint64())}
	for _, n := range names {
		// A body holds its name: two resources of different names never
		// have the same hash.
		res := codec.Resource{Name: []byte(n), Hash: xxhash.Sum64String(n) + uint64(r.IntN(2))}
		if r.IntN(12) == 0 {
			res.Heartbeat, res.Hash = true, 0
		}
		resp.Resources = append(resp.Resources, res)
	}
	if delta {
		for range r.IntN(3) {
			resp.RemovedResources = append(resp.RemovedResources, pool[r.IntN(len(pool))])
		}
	}
	return resp
}

func describeResp(resp *codec.Response) string {
	s := "["
	for _, res := range resp.Resources {
		s += fmt.Sprintf(" %q#%d", res.Name, res.Hash)
		if res.Heartbeat {
			s += "(heartbeat)"
		}
	}
	return s + fmt.Sprintf(" ] removed %q", resp.RemovedResources)
}

func compareStates(t *testing.T, where string, ts *typeState, ref *refState) {
	t.Helper()
	checkSet(t, where+": acked", &ts.acked.nameSet)
	checkSet(t, where+": sub", &ts.sub.nameSet)
	if len(ts.acked.hashes) != len(ts.acked.names) {
		t.Fatalf("%s: %d hashes for %d names", where, len(ts.acked.hashes), len(ts.acked.names))
	}
	acked := make(map[string]uint64)
	for i, n := range ts.acked.names {
		acked[n.Value()] = ts.acked.hashes[i]
	}
	wantAcked := make(map[string]uint64)
	for name, e := range ref.acked {
		wantAcked[name] = e.hash
	}
	if diff := cmp.Diff(wantAcked, acked); diff != "" {
		t.Fatalf("%s: acknowledged state (-want +got):\n%s", where, diff)
	}
	sub := make(map[string]bool)
	for _, n := range ts.sub.names {
		sub[n.Value()] = true
	}
	wantSub := make(map[string]bool)
	for name := range ref.sub {
		wantSub[name] = true
	}
	if diff := cmp.Diff(wantSub, sub); diff != "" {
		t.Fatalf("%s: subscription (-want +got):\n%s", where, diff)
	}
	if ts.sub.wildcard != ref.wildcard || ts.sub.explicit != ref.explicit {
		t.Fatalf("%s: wildcard %v explicit %v, want %v %v", where, ts.sub.wildcard, ts.sub.explicit, ref.wildcard, ref.explicit)
	}
}

// TestIndexGivenBackServesAnotherSet holds a set's index to what a set
// finds after another set gave back an index of the same size: the pooled
// index must come back empty.
func TestIndexGivenBackServesAnotherSet(t *testing.T) {
	leakcheck.Check(t)
	var a, b nameSet
	for i := range 100 {
		a.add(intern(fmt.Appendf(nil, "outbound|80||a%d.default.svc.cluster.local", i)))
		b.add(intern(fmt.Appendf(nil, "outbound|80||b%d.default.svc.cluster.local", i)))
	}
	for round := range 3 {
		a.index()
		checkSet(t, fmt.Sprintf("round %d, a", round), &a)
		a.idle()
		if a.slots != nil {
			t.Fatalf("round %d: a set of %d names kept its index after its pass", round, len(a.names))
		}
		b.index()
		checkSet(t, fmt.Sprintf("round %d, b", round), &b)
		if got := b.findString("outbound|80||a1.default.svc.cluster.local", -1); got != -1 {
			t.Fatalf("round %d: b finds a's name at %d", round, got)
		}
		b.idle()
	}
}
