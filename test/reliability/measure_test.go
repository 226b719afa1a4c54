package reliability_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	rel "github.com/adstap/adstap/test/reliability"
)

func TestLatencyWindows(t *testing.T) {
	leakcheck.Check(t)
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	var l rel.Latencies
	for i, ms := range []int{1, 3, 2, 10, 20, 30} {
		// Two windows of a second: the first three samples, then the rest.
		l.AddAt(start.Add(time.Duration(i/3)*time.Second+time.Duration(i)*time.Millisecond), time.Duration(ms)*time.Millisecond)
	}
	l.AddAt(start.Add(-time.Second), time.Hour) // before the start: ignored
	got := l.Windows(start, time.Second, 1)
	want := []time.Duration{3 * time.Millisecond, 30 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Windows max (-want +got):\n%s", diff)
	}
	if got, want := l.Windows(start, time.Second, 0.5), []time.Duration{2 * time.Millisecond, 20 * time.Millisecond}; !cmp.Equal(got, want) {
		t.Errorf("Windows median = %v, want %v", got, want)
	}
}

func TestPairedRatio(t *testing.T) {
	leakcheck.Check(t)
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name        string
		a, b        []time.Duration
		wantRatio   float64
		wantWindows int
	}{
		{"one burst does not decide", ms(10, 10, 90, 10), ms(10, 10, 10, 10), 1, 4},
		{"odd count", ms(20, 30, 40), ms(10, 10, 10), 3, 3},
		{"empty windows are skipped", ms(0, 20, 20), ms(10, 10, 0), 2, 1},
		{"nothing in common", ms(0), ms(10), 0, 0},
		{"different lengths", ms(15, 15, 15), ms(10), 1.5, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, n := rel.PairedRatio(tc.a, tc.b)
			if r != tc.wantRatio || n != tc.wantWindows {
				t.Errorf("PairedRatio = %v over %d windows, want %v over %d", r, n, tc.wantRatio, tc.wantWindows)
			}
		})
	}
}
