package benchmark_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/adstap/adstap/benchmark"
	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// The workloads check what they measure: every push arrives byte for byte
// (its xxhash is compared with what the upstream sent) and every ACK reaches
// the upstream, on each of its paths and the optional ones. Nothing here
// looks at speed.
func TestWorkloadsOverEveryPath(t *testing.T) {
	leakcheck.Check(t)
	sizes := benchmark.TinySizes()
	for _, w := range benchmark.Workloads(sizes) {
		t.Run(w.ID(), func(t *testing.T) {
			paths := benchmark.PathsOf(w)
			if w.ID() != "W7" {
				paths = append(paths, benchmark.TapOff, benchmark.TapTraced)
			}
			for _, p := range paths {
				if p == benchmark.Sidecar || p == benchmark.SidecarNoCapture {
					continue // the adstap binary: TestSidecarPaths
				}
				t.Run(string(p), func(t *testing.T) {
					var m benchmark.Middle
					start := func(up string) (benchmark.Middle, error) {
						var err error
						m, err = benchmark.InProcess(p)(up)
						return m, err
					}
					res, err := w.Run(context.Background(), start)
					if err != nil {
						t.Fatalf("%s over %s: %v", w.ID(), p, err)
					}
					checkCounts(t, w.ID(), sizes, res)
					u, _ := m.Sample()
					switch p {
					case benchmark.TapTraced:
						// Tracing on means spans came out (the spans are
						// flushed when the tap stops).
						if u.Spans == 0 || u.LogBytes == 0 {
							t.Errorf("tap-traced produced %d spans and %d bytes of live log; want both", u.Spans, u.LogBytes)
						}
					case benchmark.Tap, benchmark.TapLean:
						// As shipped, tracing is off: no collector is named.
						if u.Spans != 0 || u.LogBytes == 0 {
							t.Errorf("%s produced %d spans and %d bytes of live log; want none and some", p, u.Spans, u.LogBytes)
						}
					}
				})
			}
		})
	}
}

func checkCounts(t *testing.T, id string, s benchmark.Sizes, res benchmark.Result) {
	t.Helper()
	var pushes, acks, streams int
	switch id {
	case "W1":
		pushes, acks, streams = s.W1Pushes, s.W1Pushes+1, 1
	case "W2":
		pushes, acks, streams = s.W2Streams*s.W2Rounds, s.W2Streams*(1+s.W2Warm+s.W2Rounds), s.W2Streams
		if len(res.Latencies) != pushes {
			t.Errorf("%d latencies, want one per measured push (%d)", len(res.Latencies), pushes)
		}
	case "W3":
		pushes, acks, streams = 2*s.W3Streams, 2*s.W3Streams, s.W3Streams
	case "W4":
		pushes, acks, streams = s.W4Pushes, s.W4Pushes+1, 1
	case "W5":
		pushes, acks, streams = 2*s.W5Streams, 2*s.W5Streams, s.W5Streams
	case "W6":
		pushes, acks, streams = s.W6Streams, 2*s.W6Streams, s.W6Streams
		if len(res.Latencies) != streams {
			t.Errorf("%d latencies, want one per stream (%d)", len(res.Latencies), streams)
		}
	case "W7":
		pushes, acks, streams = len(s.W7Clusters), len(s.W7Clusters), 1
		if len(res.Footprints) != pushes {
			t.Errorf("%d footprints, want one per push (%d)", len(res.Footprints), pushes)
		}
	}
	if res.Pushes != pushes || res.ACKs != acks || res.Streams != streams {
		t.Errorf("%s: %d pushes, %d ACKs, %d streams; want %d, %d, %d", id, res.Pushes, res.ACKs, res.Streams, pushes, acks, streams)
	}
	if res.Wall <= 0 {
		t.Errorf("%s: no wall time measured", id)
	}
}

// The harness runs each middle as a process of its own and reads its usage;
// here the test binary plays the harness's executable.
func TestChildProcess(t *testing.T) {
	leakcheck.Check(t)
	if testing.Short() {
		t.Skip("starts processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := benchmark.ChildConfig{Command: []string{exe}, Env: append(os.Environ(), childEnv+"=1"), ProfileDir: t.TempDir()}
	w := benchmark.NewW1(benchmark.TinySizes())
	for _, p := range []benchmark.Path{benchmark.Relay, benchmark.TapOff, benchmark.Tap, benchmark.Typed} {
		t.Run(string(p), func(t *testing.T) {
			res, err := w.Run(context.Background(), benchmark.Child(cfg, p, func() string { return "W1-" + string(p) }))
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, "W1", benchmark.TinySizes(), res)
			if res.Middle.End.RSS <= 0 || res.Middle.PeakRSS <= 0 || res.Middle.End.CPU <= 0 {
				t.Errorf("middle usage not read: %+v", res.Middle)
			}
			for _, suffix := range []string{".cpu.pprof", ".heap.pprof"} {
				if fi, err := os.Stat(cfg.ProfileDir + "/W1-" + string(p) + suffix); err != nil || fi.Size() == 0 {
					t.Errorf("profile %s: %v", suffix, err)
				}
			}
		})
	}
}

// W7's sidecar paths run the adstap binary with the injection template's
// flags, and read its memory from /proc.
func TestSidecarPaths(t *testing.T) {
	leakcheck.Check(t)
	if testing.Short() {
		t.Skip("builds adstap and starts it")
	}
	cfg := benchmark.ChildConfig{Adstap: adstapbin.Build(t)}
	sizes := benchmark.TinySizes()
	w := benchmark.NewW7(sizes)
	// make bench runs W7 over the paths it names, the relay and the sidecar's.
	if got, want := benchmark.PathsOf(benchmark.NewWorkload("W7", sizes)), []benchmark.Path{benchmark.Relay, benchmark.Sidecar, benchmark.SidecarNoCapture}; !slices.Equal(got, want) {
		t.Errorf("W7 runs over %v, want %v", got, want)
	}
	for _, p := range []benchmark.Path{benchmark.Sidecar, benchmark.SidecarNoCapture} {
		t.Run(string(p), func(t *testing.T) {
			res, err := w.Run(context.Background(), benchmark.Child(cfg, p, func() string { return "W7-" + string(p) }))
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, "W7", sizes, res)
			for _, f := range res.Footprints {
				if f.Synced.RSS <= 0 || f.Idle.RSS <= 0 || f.Peak < f.Synced.RSS || f.Synced.FDs <= 0 {
					t.Errorf("adstap's usage not read: %+v", f)
				}
			}
		})
	}
}

// bench-compare's paths run adstap binaries with their default flags, read
// their usage from /proc and, after W6's fan-out, their losses from their
// metrics.
func TestBinaryPaths(t *testing.T) {
	leakcheck.Check(t)
	if testing.Short() {
		t.Skip("builds adstap and starts it")
	}
	bin := adstapbin.Build(t)
	cfg := benchmark.ChildConfig{Binaries: map[benchmark.Path]string{benchmark.Head: bin, benchmark.Base: bin}}
	sizes := benchmark.TinySizes()
	for _, id := range []string{"W1", "W6", "W7"} {
		w := benchmark.NewWorkload(id, sizes)
		t.Run(id, func(t *testing.T) {
			res, err := w.Run(context.Background(), benchmark.Child(cfg, benchmark.Head, func() string { return id }))
			if err != nil {
				t.Fatal(err)
			}
			checkCounts(t, id, sizes, res)
			// Its CPU is read in clock ticks: a tiny run may use less than
			// one (TestProcessUsageReadsCPU checks that CPU is read).
			if res.Middle.End.RSS <= 0 || res.Middle.PeakRSS <= 0 || res.Middle.End.FDs <= 0 || res.Middle.End.CPU < 0 {
				t.Errorf("adstap's usage not read: %+v", res.Middle)
			}
			// Go's own count, from its metrics at the window's ends (a
			// tiny run may not collect).
			if res.Middle.End.Allocated <= res.Middle.Start.Allocated {
				t.Errorf("adstap's allocation in the window not read: %d bytes", res.Middle.End.Allocated-res.Middle.Start.Allocated)
			}
			if id == "W6" && (res.Middle.End.NACKNotKept != 0 || res.Middle.End.RefsDropped != 0 || res.Middle.End.RefsStopped != 0) {
				t.Errorf("a tiny fan-out lost pushes or reference checks: %+v", res.Middle.End)
			}
		})
	}
}

// A run that would need more file descriptors than the process may open
// is refused before it starts, with the number of streams that would fit.
func TestCheckFileLimit(t *testing.T) {
	leakcheck.Check(t)
	limit, err := benchmark.FileLimit()
	if err != nil {
		t.Skip(err)
	}
	tiny := benchmark.TinySizes()
	if err := benchmark.CheckFileLimit(tiny, map[string]bool{"W5": true}); err != nil {
		t.Errorf("tiny sizes refused: %v", err)
	}
	huge := tiny
	huge.W5Streams = int(limit)
	if err := benchmark.CheckFileLimit(huge, map[string]bool{"W5": true}); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("W5 with %d streams under a limit of %d files: got %v, want an error saying how many fit", huge.W5Streams, limit, err)
	}
	if err := benchmark.CheckFileLimit(huge, map[string]bool{"W1": true}); err != nil {
		t.Errorf("W5's streams checked though only W1 runs: %v", err)
	}
}
