package gctune

import (
	"context"
	"log/slog"
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
//
// Idle is not done: an output may still be writing the push out from its
// buffers (the capture, on a slow disk or a loaded machine) while nothing
// allocates, and a give-back then frees only part of it. Taking what is
// held after it as the floor would leave the rest held for good once it is
// let go of, since nothing allocates to start a collection and what is
// held never grows over that floor again. So a give-back after which what
// is held is still grown over the floor keeps the floor and is tried
// again, after 2, 4, ... intervals, at most maxRetries times; then what is
// held is in use, and becomes the floor.
const (
	giveBackGrowth = 16 << 20
	idleAlloc      = 1 << 20
	maxRetries     = 6
)

// GiveBackWithin is the longest a tap that checks every interval takes to
// give back what it let go of once idle: the first try and, while outputs
// still hold what they write out, every retry's wait. A loaded machine
// takes longer to write a large push out than an idle one, and gives it
// back at a later try.
func GiveBackWithin(every time.Duration) time.Duration {
	n := 1
	for r := 1; r <= maxRetries; r++ {
		n += 1<<r + 1
	}
	return time.Duration(n) * every
}

// memSample is what giving back watches.
type memSample struct {
	allocs uint64 // bytes allocated since the process started
	held   uint64 // bytes the runtime holds from the OS and has not released
}

// samplesPerInterval is how often a tap looks for idle within an interval:
// idle is still a whole interval with less than idleAlloc allocated, but
// judged over the last interval at each sample rather than over fixed
// intervals, so a tap gives back within an interval and a quarter of going
// idle, not two: a sync of a thousand proxies that ended just after a
// sample left its garbage held for the second after, and a reading of the
// tap's memory two seconds after the sync found it there one time in two.
// Judging idle over a shorter span was tried and cost more than it gave: a
// fan-out's streams fall quiet for a quarter second between its bursts.
const samplesPerInterval = 4

// giver decides when to give memory back, one sample at a time, window of
// them an interval.
type giver struct {
	started bool
	window  int
	// recent holds the allocations counted at the last window samples,
	// the oldest at at; since counts the samples since the last reset, so
	// idle is judged once a whole interval has been seen.
	recent []uint64
	at     int
	since  int
	least  uint64 // the least held since the last give-back that held
	// retries counts the give-backs in a row after which what is held was
	// still grown, and wait the samples to let pass before the next.
	retries, wait int
}

// grown reports whether held has grown enough over the floor to give back.
func (g *giver) grown(held uint64) bool {
	return held >= g.least+max(giveBackGrowth, g.least/4)
}

// reset starts a new interval of samples from allocs.
func (g *giver) reset(allocs uint64) {
	if g.window == 0 {
		g.window = 1
	}
	if len(g.recent) != g.window {
		g.recent = make([]uint64, g.window)
	}
	for i := range g.recent {
		g.recent[i] = allocs
	}
	g.at, g.since = 0, 0
}

// tick takes a sample and reports whether to give back now.
func (g *giver) tick(s memSample) bool {
	if !g.started {
		g.started, g.least = true, s.held
		g.reset(s.allocs)
		return false
	}
	old := g.recent[g.at] // an interval ago, or at the reset
	g.recent[g.at] = s.allocs
	g.at = (g.at + 1) % g.window
	g.since = min(g.since+1, g.window)
	idle := g.since == g.window && s.allocs-old < idleAlloc
	g.least = min(g.least, s.held)
	if g.wait > 0 {
		g.wait--
		return false
	}
	return idle && g.grown(s.held)
}

// gaveBack takes the sample after giving back: what is held now is the new
// floor, unless it is still grown over the old one (above).
func (g *giver) gaveBack(s memSample) {
	g.reset(s.allocs)
	if g.grown(s.held) && g.retries < maxRetries {
		g.retries++
		g.wait = (1 << g.retries) * g.window
		return
	}
	g.least, g.retries, g.wait = s.held, 0, 0
}

func giveBack(ctx context.Context, every time.Duration, read func() memSample, free func(), log *slog.Logger) {
	g := giver{window: samplesPerInterval}
	g.tick(read()) // the floor: the process as it starts
	eachTick(ctx, every/samplesPerInterval, func() {
		s := read()
		if !g.tick(s) {
			return
		}
		free()
		after := read()
		g.gaveBack(after)
		log.Debug("gave memory back to the OS", "held_before_mib", s.held>>20, "held_after_mib", after.held>>20, "floor_mib", g.least>>20, "retries", g.retries)
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
