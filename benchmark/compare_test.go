package benchmark

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// The comparison pairs head and base within each round, and says the
// median of those ratios with their range.
func TestComparisonPairsRounds(t *testing.T) {
	leakcheck.Check(t)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	w1 := func(cpu int) Result { return Result{Bytes: 100e6, Middle: Window{CPU: ms(cpu)}} }
	lat := func(p99 time.Duration) []time.Duration {
		l := make([]time.Duration, 100)
		l[98], l[99] = p99, p99
		return l
	}
	runs := &Runs{
		Reps:      3,
		Workloads: []WorkloadInfo{{"W1", "w1", 3}, {"W2", "w2", 3}, {"W6", "w6", 3}},
		Results: map[string]map[Path][]Result{
			"W1": {
				// Head over base: 0.9, 1.0, 0.8 in the three rounds.
				Relay: {w1(100), w1(50), w1(100)},
				Head:  {w1(90), w1(60), w1(80)},
				Base:  {w1(100), w1(60), w1(100)},
			},
			"W2": {
				Direct: {{Latencies: lat(ms(1))}, {Latencies: lat(ms(1))}, {Latencies: lat(ms(1))}},
				Relay:  {{Latencies: lat(ms(2))}, {Latencies: lat(ms(2))}, {Latencies: lat(ms(2))}},
				Head:   {{Latencies: lat(ms(3))}, {Latencies: lat(ms(3))}, {Latencies: lat(ms(3))}},
				Base:   {{Latencies: lat(ms(5))}, {Latencies: lat(ms(5))}, {Latencies: lat(ms(5))}},
			},
			"W6": {
				Relay: {{Wall: ms(100)}, {Wall: ms(100)}, {Wall: ms(100)}},
				Head:  {{Wall: ms(100)}, {Wall: ms(110)}, {Wall: ms(100)}},
				Base:  {{Wall: ms(100), Middle: Window{End: Usage{NACKNotKept: 4141}}}, {Wall: ms(100)}, {Wall: ms(100), Middle: Window{End: Usage{NACKNotKept: 4166}}}},
			},
		},
	}
	md := (&Comparison{Runs: runs, HeadName: "h", BaseName: "b", Command: "compare"}).Markdown()
	for _, want := range []string{
		"| W1 | middle CPU per MB pushed | **0.90× (0.80–1.00)** | 0.90× (0.80–1.20) | 1.00× (1.00–1.20) |",
		"| W2 | added p99 latency (over direct) | **0.50× (0.50–0.50)** | 2.00× (2.00–2.00) | 4.00× (4.00–4.00) |",
		"| W6 | fan-out, first send → last ACK | **1.00× (1.00–1.10)** |",
		"| base | 4141 (4166) | 0 (0) | 0 (0) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("comparison lacks %q:\n%s", want, md)
		}
	}
}

// A workload runs over its own paths unless told otherwise, and, when
// told, over those it can: the optional paths beside the standard ones,
// adstap binaries beside any.
func TestPathsFor(t *testing.T) {
	leakcheck.Check(t)
	s := TinySizes()
	w1, w7 := NewWorkload("W1", s), NewWorkload("W7", s)
	for _, tt := range []struct {
		w          Workload
		asked, got []Path
	}{
		{w1, nil, standardPaths},
		{w7, nil, []Path{Relay, Sidecar, SidecarNoCapture}},
		{w1, []Path{TapOff, Head, Sidecar, Relay}, []Path{TapOff, Head, Relay}},
		{w7, []Path{TapOff, Relay, Head, Base}, []Path{Relay, Head, Base}},
	} {
		if got := pathsFor(tt.w, tt.asked); !slices.Equal(got, tt.got) {
			t.Errorf("%s asked %v: runs over %v, want %v", tt.w.ID(), tt.asked, got, tt.got)
		}
	}
}

// W2's pooled row weighs a pause of the machine's by its share of every
// round's pushes: two rounds in which the relay's window held a pause
// (its p99 20 ms there) make the per-round median say the head adds a
// tenth of what the relay adds, and the pooled row what it adds outside
// the pauses, twice as much.
func TestComparisonPoolsW2Rounds(t *testing.T) {
	leakcheck.Check(t)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// lat is a window of 1,000 pushes whose worst 11 took tail: its p99.
	lat := func(tail time.Duration) Result {
		l := make([]time.Duration, 1000)
		for i := 989; i < 1000; i++ {
			l[i] = tail
		}
		return Result{Latencies: l}
	}
	flat := func(d time.Duration) Result {
		l := make([]time.Duration, 1000)
		for i := range l {
			l[i] = d
		}
		return Result{Latencies: l}
	}
	runs := &Runs{
		Reps:      3,
		Workloads: []WorkloadInfo{{"W2", "w2", 3}},
		Results: map[string]map[Path][]Result{"W2": {
			Direct: {flat(ms(1)), flat(ms(1)), flat(ms(1))},
			Relay:  {lat(ms(20)), lat(ms(2)), lat(ms(20))},
			Head:   {lat(ms(3)), lat(ms(3)), lat(ms(3))},
			Base:   {lat(ms(3)), lat(ms(3)), lat(ms(3))},
		}},
	}
	md := (&Comparison{Runs: runs, HeadName: "h", BaseName: "b", Command: "compare"}).Markdown()
	for _, want := range []string{
		"| W2 | added p99 latency (over direct) | **1.00× (1.00–1.00)** | 0.11× (0.11–2.00) |",
		"| W2 | added p99 latency, every round's pushes pooled | **1.00×** | 2.00× | 2.00× | 2.00ms | 2.00ms | 1.00ms |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("comparison lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(md, "(over direct) | **1.00× (1.00–1.00)** | 0.11× (0.11–2.00) | 0.11× (0.11–2.00) | 2.00ms | 2.00ms | 19ms |\n| W2 | added p99 latency, every round's pushes pooled") {
		t.Errorf("the pooled row does not follow W2's per-round row:\n%s", md)
	}
}
