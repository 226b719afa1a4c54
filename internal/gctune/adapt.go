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
// pushes — is won once the headroom is a few tens of MB. And the garbage
// let grow while streams arrive is what stays behind as holes: the state a
// stream keeps is allocated among the garbage of every other stream's
// sync, and once that garbage is collected the spans it shared are held by
// the few objects kept in each (1,000 proxies synced at once left 17-19 MiB
// of such holes at 200, 11-13 MiB at this cap; docs/performance.md, W3). So the
// percent is 200 up to a scanned size of ExtraHeadroom, and above it only
// ExtraHeadroom more than Go's 100 would allow (150 at 32 MiB, 108 at
// 192 MiB).
const ExtraHeadroom = 16 << 20

// percent is the GC percent for a heap whose collector scans base bytes.
func percent(base uint64) int {
	if base <= ExtraHeadroom {
		return DefaultPercent
	}
	return 100 + int(uint64(DefaultPercent-100)*ExtraHeadroom/base)
}

// adaptStep is the smallest change of percent Adapt makes.
const adaptStep = 5

// Start keeps the GC percent at percent() of what the collector scans,
// reading it samplesPerInterval times an interval (1,000 proxies connecting
// at once take a second or two to sync: read once a second, the percent
// was still 200 for most of it), unless the user set GOGC (settings say the
// percent is not adstap's default); and it gives memory back to the OS
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

func adapt(ctx context.Context, every time.Duration, base func() uint64) {
	current := debug.SetGCPercent(-1)
	debug.SetGCPercent(current)
	eachTick(ctx, every/samplesPerInterval, func() {
		if p := percent(base()); p >= current+adaptStep || p <= current-adaptStep || (p == DefaultPercent && p != current) {
			debug.SetGCPercent(p)
			current = p
		}
	})
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
// collection, the goroutine stacks and the globals.
func scanned() uint64 {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}
	metrics.Read(s)
	var n uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			n += v.Value.Uint64()
		}
	}
	return n
}
