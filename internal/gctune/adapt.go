package gctune

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
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

// adaptStep is the smallest change of percent Adapt makes.
const adaptStep = 5

// Start keeps the GC percent at percent() of what the collector scans, or
// arrivingPercent while streams arrive (pacer), reading both
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

func adapt(ctx context.Context, every time.Duration, read func() (base, goroutines uint64)) {
	current := debug.SetGCPercent(-1)
	debug.SetGCPercent(current)
	pc := pacer{current: current}
	eachTick(ctx, every/samplesPerInterval, func() {
		if p, ok := pc.next(read()); ok {
			debug.SetGCPercent(p)
		}
	})
}

// pacer chooses the GC percent from what the collector scans and how many
// goroutines run, sampled samplesPerInterval times an interval.
type pacer struct {
	current    int
	goroutines uint64 // at the last sample; 0 before the first
	arriving   int    // samples to go at arrivingPercent
}

// next takes a sample and says the percent to set, if it is to change.
func (pc *pacer) next(base, goroutines uint64) (int, bool) {
	if pc.goroutines > 0 && goroutines >= pc.goroutines+goroutinesArriving {
		pc.arriving = 2 // this sample and the next
	}
	pc.goroutines = goroutines
	p := percent(base)
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
func scanned() (base, goroutines uint64) {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(s)
	for _, v := range s[:3] {
		if v.Value.Kind() == metrics.KindUint64 {
			base += v.Value.Uint64()
		}
	}
	if s[3].Value.Kind() == metrics.KindUint64 {
		goroutines = s[3].Value.Uint64()
	}
	return base, goroutines
}
