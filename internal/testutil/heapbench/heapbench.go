// Package heapbench measures, in a benchmark, the live heap a structure holds.
package heapbench

import (
	"runtime"
	"testing"
)

// Grown runs build as part of the timed benchmark, between two garbage
// collections outside it, and returns how far the live heap grew: what
// build's result holds. check, if not nil, runs outside the timing on that
// result before it may be collected; the timer is running again when Grown
// returns.
func Grown[T any](b *testing.B, build func() T, check func(T)) int64 {
	b.StopTimer()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.StartTimer()
	v := build()
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if check != nil {
		check(v)
	}
	runtime.KeepAlive(v)
	b.StartTimer()
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}
