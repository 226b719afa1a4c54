package refgraph

import (
	"fmt"
	"testing"

	"github.com/adstap/adstap/internal/canon"
)

// TestWaitsKeepTheirStartsWhenRenumbered fills the starts node.wait can
// tell apart, one cluster waiting since each, ends some, and starts more:
// the starts no cluster waits since are let go of, and every cluster still
// waiting keeps its own start and round.
func TestWaitsKeepTheirStartsWhenRenumbered(t *testing.T) {
	g := New(false, 0)
	g.nodes = map[name]node{}
	names := make([]name, maxWaits+3)
	for i := range names {
		names[i] = canon.Make(fmt.Sprintf("c%d", i))
	}
	start := func(i int) {
		x := g.nodes[names[i]]
		x.flags |= isCluster
		g.startWait(&x, int64(1000+i), uint64(i))
		g.nodes[names[i]] = x
	}
	for i := range maxWaits {
		start(i)
	}
	if len(g.waits) != maxWaits {
		t.Fatalf("%d starts after %d waits at distinct times, want %d", len(g.waits), maxWaits, maxWaits)
	}
	// Two clusters' waits end: their starts go when the next is needed.
	for _, i := range []int{3, 7} {
		x := g.nodes[names[i]]
		g.endWait(&x)
		g.nodes[names[i]] = x
	}
	start(maxWaits)
	start(maxWaits + 1)
	if got, want := len(g.waits), maxWaits; got != want {
		t.Errorf("%d starts after renumbering, want %d", got, want)
	}
	// The list is full of starts still waited on: one more joins the latest.
	start(maxWaits + 2)
	want := map[int]clusterWait{0: {since: 1000, round: 0}, 8: {since: 1008, round: 8}, maxWaits + 1: {since: 1000 + maxWaits + 1, round: maxWaits + 1},
		maxWaits + 2: {since: 1000 + maxWaits + 1, round: maxWaits + 1}}
	for i, w := range want {
		x := g.nodes[names[i]]
		if x.wait == 0 {
			t.Errorf("cluster %d: not waiting", i)
			continue
		}
		got := g.waits[x.wait-1]
		if got.since != w.since || got.round != w.round {
			t.Errorf("cluster %d waits since %d round %d, want %d round %d", i, got.since, got.round, w.since, w.round)
		}
	}
	for _, i := range []int{3, 7} {
		if x := g.nodes[names[i]]; x.wait != 0 {
			t.Errorf("cluster %d: waits after its wait ended", i)
		}
	}
	if got, want := g.waiting, maxWaits+1; got != want {
		t.Errorf("%d waiting, want %d", got, want)
	}
	// Every wait ends: the starts go with the last.
	for n, x := range g.nodes {
		g.endWait(&x)
		g.nodes[n] = x
	}
	g.compactWaits()
	if g.waits != nil || g.waiting != 0 {
		t.Errorf("none waits: %d starts held, %d waiting; want none", len(g.waits), g.waiting)
	}
}
