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

// MiB formats bytes as mebibytes.
func MiB(b uint64) float64 { return float64(b) / (1 << 20) }

// Latencies collects durations from several goroutines.
type Latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

// Add records one duration.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
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
