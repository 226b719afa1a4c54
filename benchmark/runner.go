package benchmark

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// RunConfig says what a harness run does.
type RunConfig struct {
	Workloads []Workload
	// Paths are the paths to run (nil: all of each workload's, PathsOf).
	Paths []Path
	// Reps is how many times each workload runs over each path. Each
	// repetition runs every path once, in an order rotated by one from the
	// previous repetition's, so the paths alternate and none always goes first.
	Reps int
	// Start gives the middle of a path; label names the run (for profiles).
	Start func(p Path, label string) StartMiddle
	// Progress gets a line per run.
	Progress io.Writer
	// Quiet, when set, makes each run wait for the rest of the machine to go
	// quiet first, within its bounds.
	Quiet *Quiet
}

// Quiet bounds the waits for a quiet machine: PerRun for one run, Total for
// a whole harness run (the waits stop once it is spent).
type Quiet struct {
	PerRun, Total time.Duration
	waited        time.Duration
}

// wait waits for the machine to go quiet, within the bounds left, and
// returns the share of a core the rest of the machine was using when it
// stopped waiting.
func (q *Quiet) wait(ctx context.Context) float64 {
	if q == nil {
		return 0
	}
	t0 := time.Now()
	busy := waitQuiet(ctx, min(q.PerRun, max(0, q.Total-q.waited)))
	q.waited += time.Since(t0)
	return busy
}

// Runs are the results of a harness run, per workload and path, in the order run.
type Runs struct {
	Workloads []WorkloadInfo
	Reps      int
	Results   map[string]map[Path][]Result
	Took      time.Duration
}

// Run runs every workload over every path, Reps times, alternating the paths.
func Run(ctx context.Context, cfg RunConfig) (*Runs, error) {
	began := time.Now()
	runs := &Runs{Reps: cfg.Reps, Results: map[string]map[Path][]Result{}}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	for _, w := range cfg.Workloads {
		paths := pathsFor(w, cfg.Paths)
		if len(paths) == 0 {
			continue
		}
		byPath := map[Path][]Result{}
		runs.Results[w.ID()] = byPath
		runs.Workloads = append(runs.Workloads, WorkloadInfo{w.ID(), w.Describe(), cfg.Reps})
		fmt.Fprintf(progress, "%s: %s\n", w.ID(), w.Describe())
		for rep := range cfg.Reps {
			order := rotate(paths, rep)
			for _, p := range order {
				label := fmt.Sprintf("%s-%s-%d", w.ID(), p, rep+1)
				if busy := cfg.Quiet.wait(ctx); busy >= 0.1 {
					fmt.Fprintf(progress, "  (other processes are using %.0f%% of a core; running anyway)\n", 100*busy)
				}
				res, err := w.Run(ctx, watch(cfg.Start(p, label)))
				if err != nil {
					return runs, fmt.Errorf("%s over %s (repetition %d): %w", w.ID(), p, rep+1, err)
				}
				byPath[p] = append(byPath[p], res)
				fmt.Fprintf(progress, "  %-9s rep %d/%d  wall %-9s middle CPU %-9s peak RSS %-9s others %3.0f%%%s\n",
					p, rep+1, cfg.Reps, fmtDur(res.Wall), fmtDur(res.Middle.CPU), fmtBytes(res.Middle.PeakRSS), 100*res.Middle.othersShare(), runDetail(w.ID(), res))
			}
		}
	}
	runs.Took = time.Since(began)
	return runs, nil
}

// pathsFor are the paths w runs over: its own (PathsOf), or of those
// asked for, the ones it can run over — its own, the optional paths for a
// workload of the standard ones, and adstap binaries (Head, Base) for any.
func pathsFor(w Workload, asked []Path) []Path {
	own := PathsOf(w)
	if len(asked) == 0 {
		return own
	}
	_, custom := w.(interface{ Paths() []Path })
	var paths []Path
	for _, p := range asked {
		if slices.Contains(own, p) || p == Head || p == Base || (!custom && slices.Contains(optionalPaths, p)) {
			paths = append(paths, p)
		}
	}
	return paths
}

func rotate[T any](s []T, n int) []T {
	n %= len(s)
	return append(slices.Clone(s[n:]), s[:n]...)
}

func runDetail(id string, r Result) string {
	switch id {
	case "W2":
		p50, p99 := percentile(r.Latencies, 0.50), percentile(r.Latencies, 0.99)
		return fmt.Sprintf("  latency p50 %s p99 %s; %d collections, %s of GC CPU, %s allocated, %s live at the end; %s", fmtDur(p50), fmtDur(p99),
			r.Middle.End.GCs-r.Middle.Start.GCs, fmtDur(r.Middle.End.GCCPU-r.Middle.Start.GCCPU),
			fmtBytes(r.Middle.End.Allocated-r.Middle.Start.Allocated), fmtBytes(r.Middle.End.LiveHeap), kernelDetail(r.Middle))
	case "W3", "W5":
		return fmt.Sprintf("  RSS idle %s, synced+settled %s (heap %s, stacks %s; after GC %s: heap %s, stacks %s), goroutines %d → %d, FDs %d → %d",
			fmtBytes(r.Idle.RSS), fmtBytes(r.Settled.RSS), fmtBytes(r.Settled.HeapInuse), fmtBytes(r.Settled.Stacks),
			fmtBytes(r.Collected.RSS), fmtBytes(r.Collected.HeapInuse), fmtBytes(r.Collected.Stacks),
			r.Idle.Goroutines, r.Settled.Goroutines, r.Idle.FDs, r.Settled.FDs)
	case "W6":
		return fmt.Sprintf("  per stream p50 %s p99 %s; pushes not kept %d, reference check: %d dropped, %d stopped; %d minor page faults", fmtDur(percentile(r.Latencies, 0.50)), fmtDur(percentile(r.Latencies, 0.99)),
			r.Middle.End.NACKNotKept, r.Middle.End.RefsDropped, r.Middle.End.RefsStopped, r.Middle.End.MinorFaults-r.Middle.Start.MinorFaults)
	case "W7":
		var out string
		for _, f := range r.Footprints {
			out += fmt.Sprintf("  %s: RSS started %s, synced %s, idle %s, peak %s;", sizeMB(f.PushBytes), fmtBytes(f.Started.RSS), fmtBytes(f.Synced.RSS), fmtBytes(f.Idle.RSS), fmtBytes(f.Peak))
		}
		return out
	}
	var detail string
	if id == "W1" {
		detail = "  " + kernelDetail(r.Middle)
	}
	if r.Middle.End.Spans > 0 || r.Middle.End.LogBytes > 0 {
		detail += fmt.Sprintf("  (observed: %d spans exported, %s of live log)", r.Middle.End.Spans, fmtBytes(r.Middle.End.LogBytes))
	}
	return detail
}

// kernelDetail is what w's middle asked of the kernel in the window.
func kernelDetail(w Window) string {
	return fmt.Sprintf("%d read and write syscalls, %d context switches, %d minor page faults",
		w.End.Syscalls-w.Start.Syscalls, w.End.ContextSwitches-w.Start.ContextSwitches, w.End.MinorFaults-w.Start.MinorFaults)
}

// percentile is the q-quantile of d (nearest rank).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	i = min(max(i-1, 0), len(s)-1)
	return s[i]
}

func median[T int64 | float64 | time.Duration](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is half the range of v relative to its median.
func spread[T int64 | float64 | time.Duration](v []T) float64 {
	m := median(v)
	if m == 0 || len(v) < 2 {
		return 0
	}
	return float64(slices.Max(v)-slices.Min(v)) / 2 / float64(m)
}

// summary is the median of a workload's runs over one path.
type summary struct {
	N                     int
	Wall, CPU             time.Duration
	WallSpread, CPUSpread float64
	PeakRSS               int64
	PerPush               time.Duration      // W1, W4
	P50, P99              time.Duration      // W2, W6 (per stream), over every repetition's pushes
	GCs                   int64              // collections in the middle during the window
	IdleRSS, SettledRSS   int64              // W3
	PerStreamRSS          float64            // W3, bytes
	PerStreamLive         float64            // W3, bytes, after a forced GC
	PerStreamGoroutines   float64            // W3
	PerStreamFDs          float64            // W3
	SettledHeap           int64              // W3
	Footprints            []footprintSummary // W7, one per push size
	Pushes, Streams       int
	// Others is the median and the largest share of a core the rest of the
	// machine used during the windows.
	OthersMedian, OthersMax float64
	// A tap's losses at its windows' ends (Usage), the median and the most.
	NACKNotKept, NACKNotKeptMax int64
	RefsDropped, RefsDroppedMax int64
	RefsStopped, RefsStoppedMax int64
}

// footprintSummary is the median of W7's footprints of one push size.
type footprintSummary struct {
	PushBytes                   int
	Started, Synced, Idle, Peak int64 // RSS as started, after sync, after idle, and the peak
}

// summarize takes the medians of a workload's runs over a path.
func summarize(results []Result) summary {
	s := summary{N: len(results)}
	var wall, cpu, perPush []time.Duration
	var peak, idle, settled, heap, gcs []int64
	var perStream, perStreamLive, goroutines, fds, others []float64
	var notKept, refsDropped, refsStopped []int64
	for _, r := range results {
		notKept = append(notKept, r.Middle.End.NACKNotKept)
		refsDropped = append(refsDropped, r.Middle.End.RefsDropped)
		refsStopped = append(refsStopped, r.Middle.End.RefsStopped)
		wall = append(wall, r.Wall)
		cpu = append(cpu, r.Middle.CPU)
		peak = append(peak, r.Middle.PeakRSS)
		if r.Pushes > 0 {
			perPush = append(perPush, r.Wall/time.Duration(r.Pushes))
		}
		gcs = append(gcs, r.Middle.End.GCs-r.Middle.Start.GCs)
		if r.Settled.RSS > 0 {
			idle = append(idle, r.Idle.RSS)
			settled = append(settled, r.Settled.RSS)
			heap = append(heap, r.Settled.HeapInuse)
			perStream = append(perStream, float64(r.Settled.RSS-r.Idle.RSS)/float64(r.Streams))
			perStreamLive = append(perStreamLive, float64(r.Collected.RSS-r.Idle.RSS)/float64(r.Streams))
			goroutines = append(goroutines, float64(r.Settled.Goroutines-r.Idle.Goroutines)/float64(r.Streams))
			fds = append(fds, float64(r.Settled.FDs-r.Idle.FDs)/float64(r.Streams))
		}
		s.Pushes, s.Streams = r.Pushes, r.Streams
		others = append(others, r.Middle.othersShare())
	}
	s.Wall, s.CPU, s.PeakRSS = median(wall), median(cpu), median(peak)
	s.WallSpread, s.CPUSpread = spread(wall), spread(cpu)
	s.PerPush, s.GCs = median(perPush), median(gcs)
	// Over every repetition's latencies together (Report.added says why).
	all := pooled(results)
	s.P50, s.P99 = percentile(all, 0.50), percentile(all, 0.99)
	s.IdleRSS, s.SettledRSS, s.SettledHeap, s.PerStreamRSS = median(idle), median(settled), median(heap), median(perStream)
	s.PerStreamLive, s.PerStreamGoroutines, s.PerStreamFDs = median(perStreamLive), median(goroutines), median(fds)
	s.OthersMedian = median(others)
	for i := range results[0].Footprints {
		var started, synced, idle, peak []int64
		for _, r := range results {
			if i < len(r.Footprints) {
				f := r.Footprints[i]
				started, synced, idle, peak = append(started, f.Started.RSS), append(synced, f.Synced.RSS), append(idle, f.Idle.RSS), append(peak, f.Peak)
			}
		}
		s.Footprints = append(s.Footprints, footprintSummary{PushBytes: results[0].Footprints[i].PushBytes,
			Started: median(started), Synced: median(synced), Idle: median(idle), Peak: median(peak)})
	}
	if len(others) > 0 {
		s.OthersMax = slices.Max(others)
	}
	s.NACKNotKept, s.NACKNotKeptMax = median(notKept), slices.Max(notKept)
	s.RefsDropped, s.RefsDroppedMax = median(refsDropped), slices.Max(refsDropped)
	s.RefsStopped, s.RefsStoppedMax = median(refsStopped), slices.Max(refsStopped)
	return s
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.0fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtBytes(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n < 1<<20:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// watched measures, around a middle's window, how much CPU the rest of the
// machine used: the load generator and the middle are subtracted from all
// the machine's busy time.
type watched struct {
	Middle
	t0         time.Time
	all0, gen0 time.Duration
}

func watch(start StartMiddle) StartMiddle {
	return func(up string) (Middle, error) {
		m, err := start(up)
		if err != nil {
			return nil, err
		}
		return &watched{Middle: m}, nil
	}
}

func (w *watched) Begin() error {
	w.all0, w.gen0, _ = machineCPU()
	w.t0 = time.Now()
	return w.Middle.Begin()
}

func (w *watched) End() (Window, error) {
	win, err := w.Middle.End()
	all, gen, _ := machineCPU()
	win.Elapsed = time.Since(w.t0)
	win.Others = max(0, (all-w.all0)-(gen-w.gen0)-win.CPU)
	return win, err
}

// othersBusy is the share of a core the rest of the machine uses now, over d.
func othersBusy(d time.Duration) float64 {
	all0, gen0, err := machineCPU()
	if err != nil {
		return 0
	}
	t0 := time.Now()
	time.Sleep(d)
	all, gen, _ := machineCPU()
	return float64((all-all0)-(gen-gen0)) / float64(time.Since(t0))
}

// waitQuiet waits, up to max, for the rest of the machine to use less than
// a tenth of a core, so other work disturbs the runs as little as it can.
// It returns the share of a core others were using when it stopped waiting.
func waitQuiet(ctx context.Context, max time.Duration) float64 {
	deadline := time.Now().Add(max)
	for {
		busy := othersBusy(300 * time.Millisecond)
		if busy < 0.1 || time.Now().After(deadline) || ctx.Err() != nil {
			return busy
		}
	}
}
