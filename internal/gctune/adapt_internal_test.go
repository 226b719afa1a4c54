package gctune

import (
	"context"
	"log/slog"
	"runtime/debug"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestPercent(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		base uint64
		want int
	}{
		{0, DefaultPercent},
		{32 << 20, DefaultPercent},
		{ExtraHeadroom, DefaultPercent},
		{2 * ExtraHeadroom, 150},
		{192 << 20, 133},
		{1 << 30, 106},
		{64 << 30, 100},
	}
	for _, tc := range tests {
		if got := percent(tc.base); got != tc.want {
			t.Errorf("percent(%d MiB) = %d, want %d", tc.base>>20, got, tc.want)
		}
	}
}

func TestFlowPercent(t *testing.T) {
	leakcheck.Check(t)
	const mib = 1 << 20
	tests := []struct {
		name       string
		base, flow uint64
		want       int
	}{
		{"no flow", 13 * mib, 0, DefaultPercent},
		{"a flow the default headroom holds", 13 * mib, 3 * mib, DefaultPercent}, // 24 MiB wanted, 26 held
		{"W2's flow", 13 * mib, 7 * mib, 430},                                    // 56 MiB of headroom: a collection every 8 intervals
		{"a flood, capped", 13 * mib, 100 * mib, 692},                            // 26 + 64 MiB
		{"a large heap's flow", 192 * mib, 40 * mib, 166},                        // 255 MiB (133 %) + 64
		{"a large heap, a flow it holds", 192 * mib, 20 * mib, 133},
		{"nothing scanned", 0, 7 * mib, DefaultPercent},
	}
	for _, tc := range tests {
		if got := flowPercent(tc.base, tc.flow); got != tc.want {
			t.Errorf("%s: flowPercent(%d MiB, %d MiB) = %d, want %d", tc.name, tc.base/mib, tc.flow/mib, got, tc.want)
		}
	}
}

// The headroom follows a flow only once every one of the last flowWindow
// intervals allocated: a burst, however large, moves nothing.
func TestPacerFollowsASteadyFlowNotABurst(t *testing.T) {
	leakcheck.Check(t)
	const mib = 1 << 20
	const base = 13 * mib
	steady := flowPercent(base, 7*mib)
	pc := pacer{current: DefaultPercent}
	var allocated uint64
	at := func(perSample uint64) int {
		allocated += perSample
		pc.next(sample{base: base, goroutines: 100, allocated: allocated})
		return pc.current
	}
	// A burst: a 40 MB push's garbage in one sample, then nothing.
	at(0)
	if got := at(100 * mib); got != DefaultPercent {
		t.Fatalf("during a burst: percent %d, want %d", got, DefaultPercent)
	}
	for i := range 4 * samplesPerInterval {
		if got := at(0); got != DefaultPercent {
			t.Fatalf("sample %d after a burst: percent %d, want %d", i, got, DefaultPercent)
		}
	}
	// A steady flow of 7 MiB an interval: the percent rises once it has
	// lasted flowWindow intervals (the first of them may be partly before
	// it), not before.
	for i := range (flowWindow - 1) * samplesPerInterval {
		if got := at(7 * mib / samplesPerInterval); got != DefaultPercent {
			t.Fatalf("sample %d of the flow: percent %d, want %d (the flow has not lasted yet)", i, got, DefaultPercent)
		}
	}
	for range 2 * samplesPerInterval {
		at(7 * mib / samplesPerInterval)
	}
	if got := at(7 * mib / samplesPerInterval); got != steady {
		t.Fatalf("after %d whole intervals of the flow: percent %d, want %d", flowWindow, got, steady)
	}
	// A quiet interval ends it (two intervals' samples: one of them whole).
	for range 2 * samplesPerInterval {
		at(0)
	}
	if got := at(7 * mib / samplesPerInterval); got != DefaultPercent {
		t.Fatalf("after a quiet interval: percent %d, want %d", got, DefaultPercent)
	}
}

// adapt follows what the collector scans: down as the heap grows past
// ExtraHeadroom, back to DefaultPercent when it shrinks.
func TestAdapt(t *testing.T) {
	leakcheck.Check(t)
	defer debug.SetGCPercent(debug.SetGCPercent(DefaultPercent))
	steps := []struct {
		base uint64
		want int
	}{
		{1 << 30, 106},
		{1 << 30, 106},
		{192 << 20, 133},
		{170 << 20, 133}, // 137: too small a change to make
		{16 << 20, DefaultPercent},
	}
	ctx, cancel := context.WithCancel(context.Background())
	entered, next := make(chan struct{}), make(chan uint64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		adapt(ctx, time.Millisecond, func() sample {
			select {
			case entered <- struct{}{}:
			case <-ctx.Done():
				return sample{}
			}
			select {
			case b := <-next:
				return sample{base: b}
			case <-ctx.Done():
				return sample{}
			}
		})
	}()
	for _, s := range steps {
		<-entered
		next <- s.base
		// adapt is reading again: what it read before is in force.
		<-entered
		if got := debug.SetGCPercent(-1); got != s.want {
			t.Errorf("after scanning %d MiB: GC percent %d, want %d", s.base>>20, got, s.want)
		}
		debug.SetGCPercent(s.want)
		next <- s.base
	}
	cancel()
	<-done
}

// While streams arrive (goroutines by the hundred from one sample to the
// next) the percent is arrivingPercent whatever the heap, until a sample
// finds none arriving.
func TestPacerCollectsMoreOftenWhileStreamsArrive(t *testing.T) {
	leakcheck.Check(t)
	const small, large = 8 << 20, 192 << 20 // percent 200 and 133
	steps := []struct {
		base, goroutines uint64
		want             int // the percent in force after the sample
	}{
		{small, 1000, DefaultPercent}, // the first sample: nothing to compare with
		{small, 1000, DefaultPercent},
		{small, 1000 + goroutinesArriving - 1, DefaultPercent}, // not quite arriving
		{small, 1000 + 2*goroutinesArriving, arrivingPercent},
		{small, 1000 + 4*goroutinesArriving, arrivingPercent}, // still arriving
		{small, 1000 + 4*goroutinesArriving, arrivingPercent}, // none this sample: one more
		{small, 1000 + 4*goroutinesArriving, DefaultPercent},
		{large, 1000 + 4*goroutinesArriving, 133},
		{large, 1000 + 6*goroutinesArriving, arrivingPercent},
		{large, 1000 + 6*goroutinesArriving, arrivingPercent},
		{large, 1000 + 6*goroutinesArriving, 133},
		{large, 10, 133}, // streams leaving are not arriving
		{large, 10, 133},
	}
	pc := pacer{current: DefaultPercent}
	for i, s := range steps {
		pc.next(sample{base: s.base, goroutines: s.goroutines})
		if pc.current != s.want {
			t.Errorf("sample %d (%d MiB scanned, %d goroutines): percent %d, want %d", i, s.base>>20, s.goroutines, pc.current, s.want)
		}
	}
}

func TestStartLeavesTheUsersGOGC(t *testing.T) {
	leakcheck.Check(t)
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	stop := Start(Settings{Percent: 150, PercentSource: "GOGC"}, time.Millisecond, slog.New(slog.DiscardHandler))
	stop()
	if got := debug.SetGCPercent(-1); got != 150 {
		t.Errorf("GC percent %d after Start with the user's GOGC=150, want it left alone", got)
	}
	debug.SetGCPercent(150)
}

// giver gives back once the process is idle after its heap grew by enough.
func TestGiveBack(t *testing.T) {
	leakcheck.Check(t)
	const mb = 1 << 20
	steps := []struct {
		allocs, held uint64 // in MiB
		want         bool
		after        uint64 // held after giving back, in MiB
		why          string
	}{
		{100, 400, false, 0, "the first sample sets the floor"},
		{300, 480, false, 0, "busy"},
		{300, 480, false, 0, "idle, 80 MiB over the floor of 400: less than a quarter"},
		{300, 510, true, 405, "idle, 110 MiB over"},
		{300, 380, false, 0, "idle, below the floor of 405: the floor follows"},
		{300, 414, false, 0, "idle, 34 MiB over the floor of 380: less than a quarter"},
		{300, 480, true, 30, "idle, 100 MiB over"},
		{301, 44, false, 0, "idle, but grew by less than 16 MiB over the 30 MiB floor"},
		{500, 200, false, 0, "busy"},
		{500, 200, true, 40, "idle after growing"},
		{500, 60, true, 40, "idle, 20 MiB over the floor of 40"},
	}
	var g giver
	for i, s := range steps {
		if got := g.tick(memSample{allocs: s.allocs * mb, held: s.held * mb}); got != s.want {
			t.Errorf("step %d (%s): give back %v, want %v", i, s.why, got, s.want)
		}
		if s.want {
			g.gaveBack(memSample{allocs: s.allocs * mb, held: s.after * mb})
		}
	}
}

// A give-back while what grew is still in use (an output writing a push out
// from its buffers) frees little or part of it: the floor stays while what
// is held is still grown over it, and it is tried again, later each time,
// until what grew is let go of; after maxRetries what is held is taken as
// in use.
func TestGiveBackRetriesWhatWasStillInUse(t *testing.T) {
	leakcheck.Check(t)
	const mb = 1 << 20
	steps := []struct {
		held  uint64 // in MiB; every step idle
		want  bool
		after uint64
		why   string
	}{
		{20, false, 0, "the floor"},
		{180, true, 178, "idle after growing, but the push is still in use"},
		{178, false, 0, "waiting: 1 of 2"},
		{178, false, 0, "waiting: 2 of 2"},
		{178, true, 149, "tried again: pools freed, most of the push still in use"},
		{149, false, 0, "waiting: 1 of 4"},
		{149, false, 0, "waiting: 2 of 4"},
		{149, false, 0, "waiting: 3 of 4"},
		{149, false, 0, "waiting: 4 of 4"},
		{149, true, 30, "tried again: the push was let go of"},
		{29, false, 0, "the floor follows"},
		{60, true, 30, "grown again"},
	}
	var g giver
	for i, s := range steps {
		if got := g.tick(memSample{allocs: 100 * mb, held: s.held * mb}); got != s.want {
			t.Errorf("step %d (%s): give back %v, want %v", i, s.why, got, s.want)
		}
		if s.want {
			g.gaveBack(memSample{allocs: 100 * mb, held: s.after * mb})
		}
	}
	if g.least != 30*mb {
		t.Errorf("floor %d MiB after a give-back that freed, want 30", g.least/mb)
	}

	// In use for good: the floor after maxRetries tries, the last of them
	// GiveBackWithin's intervals after the tap went idle.
	g = giver{}
	g.tick(memSample{allocs: 0, held: 20 * mb})
	tries, last := 0, 0
	for tick := 1; tick <= 200; tick++ {
		if g.tick(memSample{allocs: 0, held: 180 * mb}) {
			tries++
			last = tick
			g.gaveBack(memSample{allocs: 0, held: 180 * mb})
		}
	}
	if tries != maxRetries+1 {
		t.Errorf("%d give-backs of memory in use, want %d", tries, maxRetries+1)
	}
	if want := int(GiveBackWithin(time.Second) / time.Second); last != want {
		t.Errorf("the last give-back at interval %d, want GiveBackWithin's %d", last, want)
	}
	if g.least != 180*mb {
		t.Errorf("floor %d MiB, want what is in use, 180", g.least/mb)
	}
}

// Sampled several times an interval, idle is still a whole interval with
// less than idleAlloc allocated, judged over the last interval at each
// sample: a tap gives back one interval after it went quiet, whatever the
// phase of its samples, and never while it allocated within the last one.
func TestGiveBackJudgesIdleOverTheLastInterval(t *testing.T) {
	leakcheck.Check(t)
	const mb = 1 << 20
	g := giver{window: 4}
	g.tick(memSample{allocs: 0, held: 20 * mb})
	allocs := uint64(0)
	for i := range 6 { // busy, growing: never
		allocs += 10 * mb
		if g.tick(memSample{allocs: allocs, held: 200 * mb}) {
			t.Fatalf("gave back at busy sample %d", i)
		}
	}
	for i := 1; i <= 3; i++ { // quiet for less than an interval
		if g.tick(memSample{allocs: allocs, held: 200 * mb}) {
			t.Fatalf("gave back %d samples after going quiet, want %d", i, g.window)
		}
	}
	if !g.tick(memSample{allocs: allocs, held: 200 * mb}) {
		t.Fatal("did not give back a whole interval after going quiet")
	}
	g.gaveBack(memSample{allocs: allocs, held: 30 * mb})

	// Grown again, allocating 2 MiB a sample: not idle until the last
	// of them is an interval old.
	for i := range 4 {
		allocs += 2 * mb
		if g.tick(memSample{allocs: allocs, held: 100 * mb}) {
			t.Fatalf("gave back at busy sample %d", i)
		}
	}
	for i := 1; i <= 4; i++ {
		if got, want := g.tick(memSample{allocs: allocs, held: 100 * mb}), i == 4; got != want {
			t.Fatalf("quiet sample %d: give back %v, want %v", i, got, want)
		}
	}
}
