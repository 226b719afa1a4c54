package shared

import (
	"fmt"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// Numbers are appended to a buffer rather than formatted with fmt; these are
// the fmt forms they replaced, which they must match.

func latencyByFmt(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

func humanBytesByFmt(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func TestAppendLatencyMatchesFmt(t *testing.T) {
	leakcheck.Check(t)
	ds := []time.Duration{-time.Second, -1500 * time.Microsecond, -time.Microsecond, -1, 0, 1, 499, 500, 999, 1000, 1001}
	// Every microsecond to 2 ms, then steps around every boundary.
	for d := time.Duration(0); d <= 2*time.Millisecond; d += time.Microsecond {
		ds = append(ds, d, d+499, d+500)
	}
	for ms := time.Duration(0); ms <= 1100; ms++ {
		for _, off := range []time.Duration{-500 * time.Microsecond, -1, 0, 1, 499 * time.Microsecond, 500 * time.Microsecond} {
			ds = append(ds, ms*time.Millisecond+off)
		}
	}
	ds = append(ds, 59*time.Second+950*time.Millisecond, 61*time.Minute, 30*time.Second, 1<<62)
	for _, d := range ds {
		if got, want := string(AppendLatency(nil, d)), latencyByFmt(d); got != want {
			t.Errorf("AppendLatency(%d) = %q, fmt gives %q", d, got, want)
		}
	}
}

func TestAppendSizeMatchesFmt(t *testing.T) {
	leakcheck.Check(t)
	ns := []int{-1 << 20, -1, 0, 1, 999, 1023, 1024, 1025, 1028, 1075, 1076, 10239, 1<<20 - 1, 1 << 20, 1258291, 3 << 20, 10 << 30, 1<<63 - 1}
	for n := 0; n < 1<<21; n += 997 {
		ns = append(ns, n)
	}
	for _, n := range ns {
		if got, want := string(AppendSize(nil, n)), humanBytesByFmt(n); got != want {
			t.Errorf("AppendSize(%d) = %q, fmt gives %q", n, got, want)
		}
	}
}
