package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// After a large push the heap stays at what it grew to: the collector does
// not run again until something allocates, and the runtime's scavenger
// hands freed pages back to the OS only above the heap's goal, which the
// push raised. A tap that relayed a 100 MB push sat at its peak RSS for as
// long as it stayed idle. So a tap gives memory back once it is idle after
// its heap grew: when the memory the runtime holds (less what it already
// released) has grown by giveBackGrowth, or a quarter, over the least it
// held since it last gave back, and the process then allocated less than
// idleAlloc in a whole interval, it collects twice — the first collection
// moves what pools hold (gRPC's buffers, the decoder's scratch) to their
// victim caches, the second frees them — and returns the free pages
// (debug.FreeOSMemory). A busy tap is never idle, so it never pays for it.
const (
	giveBackGrowth = 16 << 20
	idleAlloc      = 1 << 20
)

// memSample is what giving back watches.
type memSample struct {
	allocs uint64 // bytes allocated since the process started
	held   uint64 // bytes the runtime holds from the OS and has not released
}

// giver decides when to give memory back, one sample per interval.
type giver struct {
	started    bool
	lastAllocs uint64
	least      uint64 // the least held since the last give-back
}

// tick takes the interval's sample and reports whether to give back now.
func (g *giver) tick(s memSample) bool {
	if !g.started {
		g.started, g.lastAllocs, g.least = true, s.allocs, s.held
		return false
	}
	idle := s.allocs-g.lastAllocs < idleAlloc
	g.lastAllocs = s.allocs
	g.least = min(g.least, s.held)
	return idle && s.held >= g.least+max(giveBackGrowth, g.least/4)
}

// gaveBack takes the sample after giving back: what is held now is the new
// floor.
func (g *giver) gaveBack(s memSample) { g.lastAllocs, g.least = s.allocs, s.held }

func giveBack(ctx context.Context, every time.Duration, read func() memSample, free func()) {
	var g giver
	g.tick(read()) // the floor: the process as it starts
	eachTick(ctx, every, func() {
		if g.tick(read()) {
			free()
			g.gaveBack(read())
		}
	})
}

func readMemory() memSample {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	return memSample{allocs: v(0), held: v(1) - v(2)}
}

// freeMemory collects twice, so that what pools held is freed too, and
// returns the free pages to the OS.
func freeMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}
