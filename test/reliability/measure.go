package reliability

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// HeapAfterGC is the live heap after two collections (the second empties
// the pools' victim caches), from runtime.ReadMemStats.
func HeapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Latencies collects durations from several goroutines, each with the time
// it was taken at.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
	at []time.Time
}

// AddAt records one duration taken at at.
func (l *Latencies) AddAt(at time.Time, d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.at = append(l.at, at)
	l.mu.Unlock()
}

// Len is the number of durations recorded.
func (l *Latencies) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.d)
}

// Quantile is the q-quantile (0..1) of the durations, by the nearest rank.
func (l *Latencies) Quantile(q float64) time.Duration {
	l.mu.Lock()
	d := slices.Clone(l.d)
	l.mu.Unlock()
	return quantile(d, q)
}

// Windows splits the durations by when they were taken into windows of
// length w from start, and returns each window's q-quantile (0 for a window
// with nothing in it).
func (l *Latencies) Windows(start time.Time, w time.Duration, q float64) []time.Duration {
	l.mu.Lock()
	var byWindow [][]time.Duration
	for i, at := range l.at {
		k := int(at.Sub(start) / w)
		if k < 0 {
			continue
		}
		for len(byWindow) <= k {
			byWindow = append(byWindow, nil)
		}
		byWindow[k] = append(byWindow[k], l.d[i])
	}
	l.mu.Unlock()
	out := make([]time.Duration, len(byWindow))
	for k, d := range byWindow {
		out[k] = quantile(d, q)
	}
	return out
}

// PairedRatio is the median, over the windows where both have samples, of
// a's quantile over b's: how two series measured side by side compare,
// window by window, so that a burst that happens to hit one of them in one
// window does not decide the whole comparison.
func PairedRatio(a, b []time.Duration) (median float64, windows int) {
	var r []float64
	for k := range min(len(a), len(b)) {
		if a[k] > 0 && b[k] > 0 {
			r = append(r, float64(a[k])/float64(b[k]))
		}
	}
	if len(r) == 0 {
		return 0, 0
	}
	slices.Sort(r)
	if len(r)%2 == 1 {
		return r[len(r)/2], len(r)
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2, len(r)
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q*float64(len(d))+0.5) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// Ms formats a duration in milliseconds with two decimals.
func Ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}
