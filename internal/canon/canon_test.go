package canon

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unique"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// eachHashing runs test with the table's hash, and with every name hashed
// alike, so that the lists of names under one hash are exercised too.
func eachHashing(t *testing.T, test func(t *testing.T, collide bool)) {
	for _, collide := range []bool{false, true} {
		name := "hashed"
		if collide {
			name = "every hash alike"
		}
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			if collide {
				old := hashOf
				hashOf = func(string) uint64 { return 42 }
				t.Cleanup(func() { hashOf = old })
			}
			test(t, collide)
		})
	}
}

func TestEqualNamesAreOneName(t *testing.T) {
	eachHashing(t, func(t *testing.T, _ bool) {
		texts := []string{"", "a", "outbound|80||reviews.default.svc.cluster.local", "b", strings.Repeat("x", 300)}
		var first []Name
		for _, s := range texts {
			first = append(first, Make(s))
		}
		for i, s := range texts {
			b := []byte(s)
			if got := MakeBytes(b); got != first[i] {
				t.Errorf("MakeBytes(%q) is not the Name Make(%q) returned", s, s)
			}
			if got := first[i].Value(); got != s {
				t.Errorf("Make(%q).Value() = %q", s, got)
			}
			for j := range texts {
				if j != i && first[j] == first[i] {
					t.Errorf("Make(%q) == Make(%q)", texts[i], texts[j])
				}
			}
			// The Name keeps a copy: the caller's bytes are its own.
			for k := range b {
				b[k] = '!'
			}
			if got := first[i].Value(); got != s {
				t.Errorf("after its bytes changed, the Name of %q reads %q", s, got)
			}
		}
		if got := (Name{}).Value(); got != "" {
			t.Errorf("the zero Name reads %q", got)
		}
		if Make("") == (Name{}) {
			t.Error(`Make("") is the zero Name`)
		}
		runtime.KeepAlive(first)
	})
}

// TestNamesNoOneHoldsAreLetGo: a name no Name refers to is collected, and
// the sweeps that adding names brings drop its entry, so that the table
// holds about what is live, whatever went through it.
func TestNamesNoOneHoldsAreLetGo(t *testing.T) {
	eachHashing(t, func(t *testing.T, collide bool) {
		// Every hash alike, each Make reads the whole list.
		batch := 20_000
		if collide {
			batch = 400
		}
		kept := make([]Name, 0, batch)
		for i := range batch {
			kept = append(kept, Make(fmt.Sprintf("%s-kept-%d", t.Name(), i)))
		}
		before := Len()
		for round := range 5 {
			for i := range batch {
				Make(fmt.Sprintf("%s-gone-%d-%d", t.Name(), round, i))
			}
			runtime.GC()
		}
		// Five batches went through; the table holds those kept and
		// at most about as many entries again of names collected.
		if got, limit := Len(), before+2*batch+shardCount*256; got > limit {
			t.Errorf("after %d names no one holds, the table holds %d entries; want at most %d (%d before)", 5*batch, got, limit, before)
		}
		for i, n := range kept {
			if want := fmt.Sprintf("%s-kept-%d", t.Name(), i); n.Value() != want || Make(want) != n {
				t.Fatalf("kept Name %d reads %q, want %q, the same Name", i, n.Value(), want)
			}
		}
	})
}

func TestConcurrentMakersGetOneName(t *testing.T) {
	leakcheck.Check(t)
	const makers, count = 8, 2000
	got := make([][]Name, makers)
	var wg sync.WaitGroup
	for m := range makers {
		wg.Go(func() {
			for i := range count {
				got[m] = append(got[m], Make(fmt.Sprint("concurrent-", i)))
			}
		})
	}
	wg.Wait()
	for m := 1; m < makers; m++ {
		for i := range count {
			if got[m][i] != got[0][i] {
				t.Fatalf("maker %d got another Name for %q than maker 0", m, got[0][i].Value())
			}
		}
	}
}

// BenchmarkMemoryPerName is what a sidecar synced on 40,000 clusters spends
// on their names, against unique's.
func BenchmarkMemoryPerName(b *testing.B) {
	texts := make([][]byte, 40_000)
	for _, bc := range []struct {
		name string
		make func(i int) any
	}{
		{"canon", func(i int) any { return MakeBytes(texts[i]) }},
		{"unique", func(i int) any { return unique.Make(string(texts[i])) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var per float64
			round := 0
			// Every round's names are held to the end: memory the last
			// round freed would be reused, and not counted.
			var rounds [][]any
			for b.Loop() {
				// Names of their own each round: the last round's are
				// interned still.
				round++
				for i := range texts {
					texts[i] = fmt.Appendf(texts[i][:0], "outbound|8080||svc-%05d.ns-%03d.svc.cluster.local-%d", i, i%100, round)
				}
				held := make([]any, len(texts))
				for i := range held {
					held[i] = struct{}{} // boxed once, before the count
				}
				before := inUse()
				for i := range texts {
					held[i] = bc.make(i)
				}
				per += float64(inUse()-before) / float64(len(texts))
				rounds = append(rounds, held)
			}
			runtime.KeepAlive(rounds)
			per /= float64(round)
			b.ReportMetric(per, "B/name")
		})
	}
}

// inUse is the memory the runtime uses, after a collection: the heap's
// spans in use and its own structures, weak pointers' among them.
func inUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse + m.MSpanInuse + m.MCacheInuse + m.GCSys + m.OtherSys)
}
