package track

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/adstap/adstap/internal/canon"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestEntriesShareTheirPushsStamp gives a table's entries versions push
// after push, as answers do, some entries at a time, and removes and adds
// entries, against a model of what each entry holds: every entry reads
// what it was given, the entries given the same version at once hold one
// stamp, and a stamp no entry holds any more is reused rather than kept.
func TestEntriesShareTheirPushsStamp(t *testing.T) {
	leakcheck.Check(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var tab resTable
	want := map[name]resStamp{}
	for i := range 200 {
		n := intern(fmt.Appendf(nil, "outbound|80||s%d.default.svc.cluster.local", i))
		tab.add(n, ClientRequested, 1, 1000)
		want[n] = resStamp{at: 1}
	}
	check := func(step string) {
		t.Helper()
		live := map[resStamp]bool{}
		for k, n := range tab.names.names {
			got := tab.stampOf(k)
			got.uses = 0
			if got != want[n] {
				t.Fatalf("%s: %s holds %v at %d, want %v at %d", step, n.Value(), got.version.Value(), got.at, want[n].version.Value(), want[n].at)
			}
			if got != (resStamp{}) {
				live[got] = true
			}
		}
		if len(tab.ents) != len(want) {
			t.Fatalf("%s: %d entries, want %d", step, len(tab.ents), len(want))
		}
		if held := len(tab.stamps) - 1 - len(tab.free); held != len(live) {
			t.Fatalf("%s: %d stamps held for %d distinct versions and times", step, held, len(live))
		}
	}
	check("requested")
	most := 0
	for push := range 100 {
		v, at := canon.Make(fmt.Sprint("v", push)), int64(100+push)
		for k, n := range tab.names.names {
			if rng.IntN(3) == 0 {
				continue // not in this push
			}
			tab.stamp(k, v, at)
			want[n] = resStamp{version: v, at: at}
		}
		// What a push adds under the wildcard: an entry since the push,
		// then accepted at its version.
		for j := range 3 {
			n := intern(fmt.Appendf(nil, "wildcard-%d-%d", push, j))
			k := tab.add(n, ClientUnknown, at, 1000)
			tab.stamp(k, v, at)
			want[n] = resStamp{version: v, at: at}
		}
		if push%10 == 9 {
			k := rng.IntN(len(tab.ents))
			n := tab.names.names[k]
			tab.stamp(k, name{}, 0)
			last := len(tab.ents) - 1
			tab.names.removeAt(k)
			tab.ents[k] = tab.ents[last]
			tab.ents = tab.ents[:last]
			delete(want, n)
			n = intern(fmt.Appendf(nil, "added-%d", push))
			tab.add(n, ClientRequested, at, 1000)
			want[n] = resStamp{at: at}
		}
		check(fmt.Sprintf("push %d", push))
		most = max(most, len(tab.stamps))
	}
	// Each push leaves a third of the entries on older stamps, so a few
	// pushes' stamps are held at once; kept, they would be a hundred.
	if most > 20 {
		t.Errorf("the table grew to %d stamps over 100 pushes; a stamp no entry holds must be reused", most)
	}
}
