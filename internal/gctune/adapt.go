package gctune

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"time"
)

// ExtraHeadroom caps what DefaultPercent lets the heap grow beyond Go's
// default. The collector lets the heap grow by GC percent of what it scans
// (the live heap, the goroutine stacks, the globals) before it collects
// again. At 200 a tap with many streams, whose live heap and stacks are
// hundreds of MB, would keep twice that much again in garbage and freed
// pages, while what 200 is for — fewer collections under a steady flow of
// pushes — is already won once the headroom is a few tens of MB. So the
// percent is 200 up to a scanned size of ExtraHeadroom, and above it only
// ExtraHeadroom more than Go's 100 would allow (133 at 192 MiB, 106 at
// 1 GiB).
const ExtraHeadroom = 64 << 20

// While streams arrive in numbers the percent is arrivingPercent, whatever
// the heap. What a stream keeps for its life (its transports, its tracked
// state) is allocated then, among the garbage of every other stream's sync;
// once that garbage is collected, the spans it shared stay held by the few
// objects kept in each, holes the runtime cannot give back. The more garbage
// a cycle lets pile up, the more it lies between the kept objects: 1,000
// proxies connecting at once (istiod or the tap restarted, W3) left 15-19
// MiB of holes at 200, 11-13 at 100 and 8-10 at 50 (docs/performance.md,
// W3), the relay 7-9. Streams are counted by their goroutines (a dozen each
// on grpc-go), which no flow of pushes starts: they arrive while a sample
// finds goroutinesArriving more than the one before, and the percent is
// arrivingPercent until a sample finds none. The collections it adds cost
// little while the heap is what a few syncs make of it.
const (
	goroutinesArriving = 128 // a quarter-second's, about ten streams
	arrivingPercent    = 50
)

// percent is the GC percent for a heap whose collector scans base bytes.
func percent(base uint64) int {
	if base <= ExtraHeadroom {
		return DefaultPercent
	}
	return 100 + int(uint64(DefaultPercent-100)*ExtraHeadroom/base)
}

// Under a steady flow of pushes the headroom follows the flow: at least
// FlowIntervals intervals' worth of what the process allocates, so that a
// flow collects about once in that time, at most ExtraHeadroom more than
// percent alone gives. Every push's observation is garbage a moment later
// (about 3.8 KB a push and its ACK in W2, four times what a pass-through
// relay allocates), and each collection during a flow makes the pushes that
// meet it a few milliseconds late, a hundred at once at 2,000 pushes a
// second: at percent's 200, W2's tap collected twice as often as the relay
// and its p99 was twice the relay's (docs/performance.md, W2). A flow is
// allocation in every one of the last flowWindow intervals, at the least of
// them, so a single push, however large (W7's 40 MB, W6's fan-out), or a
// sync moves nothing: the headroom grows only for a flow that lasts, and
// then by at most ExtraHeadroom.
const flowWindow = 4 // intervals

// FlowIntervals is how many intervals of a steady flow the headroom holds
// (flowPercent), for the start-up log.
const FlowIntervals = 8

// flowPercent is the GC percent for a heap whose collector scans base
// bytes, under a flow that allocated at least flow bytes in each of the
// last flowWindow intervals.
func flowPercent(base, flow uint64) int {
	p := percent(base)
	if base == 0 {
		return p
	}
	headroom := base * uint64(p) / 100
	want := min(flow*FlowIntervals, headroom+ExtraHeadroom)
	if want <= headroom {
		return p
	}
	return int(want * 100 / base)
}

// adaptStep is the smallest change of percent Adapt makes.
const adaptStep = 5

// Start keeps the GC percent at percent() of what the collector scans, more
// under a steady flow (flowPercent), or arrivingPercent while streams arrive
// (pacer), reading them
// samplesPerInterval times an interval, unless the user set GOGC (settings
// say the percent is not adstap's default); and it gives memory back to the OS
// once the process is idle after its heap grew (giveBack), saying so on log
// at debug level. It runs until the returned stop is called; stop waits for
// it to end.
func Start(s Settings, every time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		giveBack(ctx, every, readMemory, freeMemory, log)
	}()
	if s.PercentSource == defaultSource {
		wg.Add(1)
		go func() {
			defer wg.Done()
			adapt(ctx, every, scanned)
		}()
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

func adapt(ctx context.Context, every time.Duration, read func() sample) {
	current := debug.SetGCPercent(-1)
	debug.SetGCPercent(current)
	pc := pacer{current: current}
	eachTick(ctx, every/samplesPerInterval, func() {
		if p, ok := pc.next(read()); ok {
			debug.SetGCPercent(p)
		}
	})
}

// sample is what the pacer reads: what the collector scans, how many
// goroutines run, and how much the process has allocated since it started.
type sample struct{ base, goroutines, allocated uint64 }

// pacer chooses the GC percent from what the collector scans, how many
// goroutines run and the flow of allocation, sampled samplesPerInterval
// times an interval.
type pacer struct {
	current    int
	goroutines uint64 // at the last sample; 0 before the first
	arriving   int    // samples to go at arrivingPercent
	// The flow: allocated at the last sample, what the interval in
	// progress has allocated so far and its samples, and the last
	// flowWindow intervals' allocation (done of them complete so far).
	allocated uint64
	partial   uint64
	samples   int
	intervals [flowWindow]uint64
	done      int
}

// next takes a sample and says the percent to set, if it is to change.
func (pc *pacer) next(s sample) (int, bool) {
	base, goroutines := s.base, s.goroutines
	if pc.goroutines > 0 && goroutines >= pc.goroutines+goroutinesArriving {
		pc.arriving = 2 // this sample and the next
	}
	pc.goroutines = goroutines
	p := flowPercent(base, pc.flow(s.allocated))
	if pc.arriving > 0 {
		pc.arriving--
		p = arrivingPercent
	}
	if p >= pc.current+adaptStep || p <= pc.current-adaptStep || ((p == DefaultPercent || p == arrivingPercent) && p != pc.current) {
		pc.current = p
		return p, true
	}
	return 0, false
}

// flow takes the allocation counter's sample and says the least any of
// the last flowWindow intervals allocated (0 until there have been as many).
func (pc *pacer) flow(allocated uint64) uint64 {
	if pc.samples > 0 {
		pc.partial += allocated - min(allocated, pc.allocated)
	}
	pc.allocated = allocated
	pc.samples++
	if pc.samples > samplesPerInterval {
		copy(pc.intervals[1:], pc.intervals[:flowWindow-1])
		pc.intervals[0] = pc.partial
		pc.done = min(pc.done+1, flowWindow)
		pc.partial, pc.samples = 0, 1
	}
	if pc.done < flowWindow {
		return 0
	}
	return slices.Min(pc.intervals[:])
}

// eachTick calls f every interval until ctx is done.
func eachTick(ctx context.Context, every time.Duration, f func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// scanned is what the collector scans: the live heap as of the last
// collection, the goroutine stacks and the globals; and how many goroutines
// there are.
func scanned() sample {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/gc/heap/allocs:bytes"},
	}
	metrics.Read(s)
	var got sample
	for _, v := range s[:3] {
		if v.Value.Kind() == metrics.KindUint64 {
			got.base += v.Value.Uint64()
		}
	}
	if s[3].Value.Kind() == metrics.KindUint64 {
		got.goroutines = s[3].Value.Uint64()
	}
	if s[4].Value.Kind() == metrics.KindUint64 {
		got.allocated = s[4].Value.Uint64()
	}
	return got
}
