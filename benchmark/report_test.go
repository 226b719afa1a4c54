package benchmark

import (
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReportTargets(t *testing.T) {
	leakcheck.Check(t)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	lat := func(p99 time.Duration) []time.Duration {
		l := make([]time.Duration, 100)
		for i := range l {
			l[i] = p99 / 2
		}
		l[98], l[99] = p99, p99
		return l
	}
	runs := &Runs{
		Workloads: []WorkloadInfo{{"W1", "w1", 1}, {"W2", "w2", 1}, {"W3", "w3", 1}, {"W6", "w6", 1}, {"W7", "w7", 1}},
		Results: map[string]map[Path][]Result{
			"W1": {
				Direct:  {{Wall: ms(100), Pushes: 10}},
				Relay:   {{Wall: ms(200), Pushes: 10, Bytes: 100e6, Middle: Window{CPU: ms(100)}}},
				TapLean: {{Wall: ms(200), Pushes: 10, Bytes: 100e6, Middle: Window{CPU: ms(110)}}},
				Tap:     {{Wall: ms(210), Pushes: 10, Bytes: 100e6, Middle: Window{CPU: ms(120)}}},
				Typed:   {{Wall: ms(400), Pushes: 10, Middle: Window{CPU: ms(300)}}},
			},
			"W2": {
				Direct: {{Wall: ms(100), Latencies: lat(ms(1))}},
				Relay:  {{Wall: ms(100), Latencies: lat(ms(2))}},
				Tap:    {{Wall: ms(100), Latencies: lat(ms(3))}},
			},
			"W3": {
				Relay: {{Streams: 1000, Idle: Usage{RSS: 20e6}, Settled: Usage{RSS: 120e6}, Collected: Usage{RSS: 110e6}}},
				Tap:   {{Streams: 1000, Idle: Usage{RSS: 20e6}, Settled: Usage{RSS: 170e6}, Collected: Usage{RSS: 150e6}}},
			},
			"W6": {
				Relay: {{Wall: ms(100), Streams: 1000}},
				Tap:   {{Wall: ms(105), Streams: 1000, Middle: Window{End: Usage{NACKNotKept: 4141}}}},
			},
			"W7": {
				Relay: {{Footprints: []Footprint{
					{PushBytes: 10e6, Synced: Usage{RSS: 36e6}, Idle: Usage{RSS: 36e6}, Peak: 37e6},
					{PushBytes: 40e6, Synced: Usage{RSS: 67e6}, Idle: Usage{RSS: 67e6}, Peak: 68e6},
				}}},
				Sidecar: {{Footprints: []Footprint{
					{PushBytes: 10e6, Started: Usage{RSS: 31e6}, Synced: Usage{RSS: 45e6}, Idle: Usage{RSS: 30e6}, Peak: 50e6},
					{PushBytes: 40e6, Started: Usage{RSS: 31e6}, Synced: Usage{RSS: 100e6}, Idle: Usage{RSS: 40e6}, Peak: 110e6},
				}}},
			},
		},
	}
	r := &Report{Runs: runs, Codec: &CodecResult{Runs: 1, MBPerSec: 7800, AllocsPerOp: 2, Resources: codecResources}}
	got := map[string]Target{}
	for _, tg := range r.targets() {
		got[tg.What] = tg
	}
	for what, met := range map[string]bool{
		"W1 middle CPU, typed relay / tap as shipped":                                                                                               true,  // 2.5
		"W1 middle CPU per MB pushed, tap as shipped / pass-through relay":                                                                          true,  // 1.20
		"W2 added p99 latency, tap as shipped − direct":                                                                                             false, // +2ms
		"W2 added p99 latency, tap as shipped / pass-through relay":                                                                                 false, // 2.0
		"W2 added p50 latency, tap as shipped / pass-through relay":                                                                                 false, // 2.0
		"W3 RSS per idle synced stream, tap as shipped / pass-through relay":                                                                        false, // 1.5
		"W3 RSS per idle synced stream, tap as shipped":                                                                                             true,  // 150 KB
		"W7 RSS of an idle adstap with no streams, the binary with the template's flags, before its stream":                                         false, // 31 MB
		"W6 fan-out convergence (first send → last ACK), tap as shipped / pass-through relay":                                                       true,  // 1.05
		"W6 pushes not kept for their answer after the fan-out, tap as shipped (adstap_nack_not_kept_total)":                                        false, // 4141
		"W6 streams no longer checked for references after the fan-out, tap as shipped (dropped by the check's queue + stopped)":                    true,
		"W7 RSS after sync, one stream's 10.0 MB CDS push, adstap with the template's flags (capture and reference check on) / pass-through relay":  true,  // 1.25
		"W7 RSS after sync, one stream's 40.0 MB CDS push, adstap with the template's flags (capture and reference check on) / pass-through relay":  false, // 1.49
		"W7 RSS after idle, one stream's 40.0 MB CDS push, adstap with the template's flags (capture and reference check on) / pass-through relay":  true,  // 0.60
		"W7 RSS at the peak, one stream's 10.0 MB CDS push, adstap with the template's flags (capture and reference check on) / pass-through relay": true,  // 1.35
		"W7 RSS at the peak, one stream's 40.0 MB CDS push, adstap with the template's flags (capture and reference check on) / pass-through relay": false, // 1.62
	} {
		tg, ok := got[what]
		if !ok || !tg.Known || tg.Met != met {
			t.Errorf("%s: %+v, want known and met=%v", what, tg, met)
		}
	}
	md := r.Markdown()
	for _, want := range []string{"| W1 | tap |", "1.05× · 1.09×", "pushes not kept 4141", "7.80 GB/s", "**missed**", "150 KB per stream", "| 40.0 MB | template's flags | 63.9 MiB · 63.9 MiB | 95.4 MiB · 38.1 MiB | 1.49× · 0.60× | 64.8 MiB · 104.9 MiB | 1.62× |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// W2's added p99 is over every repetition's pushes together: a collection
// that made four pushes slow in one repetition of three counts at its rate
// (4 in 300, over the 1 %), where a median of each repetition's p99 would
// not see it.
func TestW2AddedLatencyPoolsTheRepetitions(t *testing.T) {
	leakcheck.Check(t)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	rep := func(slow int) Result {
		l := make([]time.Duration, 100)
		for i := range l {
			l[i] = ms(1)
			if i < slow {
				l[i] = ms(10)
			}
		}
		return Result{Latencies: l}
	}
	none := Result{Latencies: make([]time.Duration, 100)}
	r := &Report{Runs: &Runs{Results: map[string]map[Path][]Result{"W2": {
		Direct: {none, none, none},
		Relay:  {rep(0), rep(0), rep(0)},
		Tap:    {rep(0), rep(0), rep(4)},
	}}}}
	for _, tc := range []struct {
		p    Path
		want time.Duration
	}{{Relay, ms(1)}, {Tap, ms(10)}} {
		if got := r.addedP99(tc.p); got != tc.want {
			t.Errorf("added p99 over %s = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got, text := r.addedRatio(Tap, 0.99); got != 10 {
		t.Errorf("added p99 ratio = %v (%s), want 10", got, text)
	}
}

func TestWriteDocKeepsTheRest(t *testing.T) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "performance.md")
	if err := WriteDoc(path, "first\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	page := strings.Replace(string(b), beginMarker, "Intro.\n\n"+beginMarker, 1) + "\n## Analysis\n\nKept.\n"
	os.WriteFile(path, []byte(page), 0o644)
	if err := WriteDoc(path, "second\n"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	got := string(b)
	if strings.Contains(got, "first") || !strings.Contains(got, "second") || !strings.Contains(got, "Intro.") || !strings.Contains(got, "Kept.") {
		t.Errorf("page after the second write:\n%s", got)
	}
}

func TestParseCodecBench(t *testing.T) {
	leakcheck.Check(t)
	out := []byte(`goos: linux
BenchmarkDecodeCDS10MB 	     895	   1303117 ns/op	7700.10 MB/s	      1003 B/resource	      88 B/op	       2 allocs/op
BenchmarkDecodeCDS10MB 	     902	   1290000 ns/op	7800.00 MB/s	      1003 B/resource	      88 B/op	       2 allocs/op
BenchmarkDecodeCDS10MB 	     900	   1310000 ns/op	7600.00 MB/s	      1003 B/resource	      88 B/op	       2 allocs/op
PASS
`)
	r, err := parseCodecBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Runs != 3 || r.MBPerSec != 7700.10 || r.AllocsPerOp != 2 || r.BytesPerOp != 88 {
		t.Errorf("parsed %+v", r)
	}
}

// W2's detail counts its collections in words that agree with the count.
func TestW2DetailCountsCollections(t *testing.T) {
	leakcheck.Check(t)
	r := &Report{Runs: &Runs{Results: map[string]map[Path][]Result{"W2": {
		Direct: {{Latencies: make([]time.Duration, 100)}},
		Relay:  {{Latencies: make([]time.Duration, 100)}},
	}}}}
	for _, tc := range []struct {
		gcs  int64
		want string
	}{{1, "; 1 collection per repetition"}, {4, "; 4 collections per repetition"}, {0, "; 0 collections per repetition"}} {
		if got := r.detail("W2", Relay, summary{GCs: tc.gcs}); !strings.HasSuffix(got, tc.want) {
			t.Errorf("W2 detail with %d collections = %q, want it to end %q", tc.gcs, got, tc.want)
		}
	}
}
