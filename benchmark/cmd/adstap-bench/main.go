// Command adstap-bench measures adstap against the floor and against the
// usual alternative, in one run (`make bench`): each workload of
// benchmark goes over five paths — direct, a plain pass-through relay
// with one upstream connection per client connection, the tap as
// `adstap run` ships (its default flags), the same with every optional
// output off, and a typed relay that re-marshals every message, as
// istio-agent's proxy does — alternated,
// several times. The middle of each path runs as a child process of this
// program (`adstap-bench serve-tap` / `serve-relay` / `serve-typed`), so its
// CPU time and resident memory are its own. The table goes to stdout and
// into docs/performance.md.
//
// W7 goes over the relay and adstap itself, the binary (-adstap), started
// with the injection template's flags, with and without its capture.
//
//	adstap-bench [-quick] [-reps N] [-workloads W1,…,W7] [-paths LIST] [-w5-streams N] [-adstap BIN] [-out FILE] [-profile DIR] [-trace DIR] [-codec=false]
//	adstap-bench compare -head BIN -base BIN [-quick] [-rounds N] [-workloads W1,W2,W6,W7] [-out FILE]
//
// compare alternates two adstap binaries, each run with its default flags,
// with the pass-through relay beside them in every round, and prints
// head/base ratios (`make bench-compare BASE=<commit>`).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/adstap/adstap/benchmark"
)

func main() {
	// Thousands of streams take two descriptors each, on both sides.
	benchmark.RaiseFileLimit()
	if len(os.Args) > 1 && (os.Args[1] == "serve-tap" || os.Args[1] == "serve-relay" || os.Args[1] == "serve-typed") {
		os.Exit(benchmark.ServeChild(os.Args[1], os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	args := os.Args[1:]
	compareRun := len(args) > 0 && args[0] == "compare"
	if len(args) > 0 && (args[0] == "run" || compareRun) {
		args = args[1:]
	}
	// The load generator collects garbage rarely, so its pauses stay out of
	// the measurements as much as they can. SetGCPercent, not GOGC, so that
	// the middles start with the environment they would have: the taps tune
	// their collector as `adstap run` does (internal/gctune), the typed
	// relay keeps Go's defaults.
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if compareRun {
		os.Exit(compare(ctx, args, os.Stdout, os.Stderr))
	}
	os.Exit(run(ctx, args, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("adstap-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a short run: the same sizes, fewer pushes and one repetition (about half a minute)")
	reps := fs.Int("reps", 0, "repetitions of each workload over each path (default 9 for W1, 5 for W2, W4 and W6, 3 for W3, W5 and W7; 1 with -quick)")
	only := fs.String("workloads", strings.Join(benchmark.WorkloadIDs, ","), "`list` of workloads to run")
	paths := fs.String("paths", "", "`list` of paths to run (default: direct, relay, tap, tap-lean and typed, and for W7 relay and the sidecar paths; also tap-off and tap-traced: "+pathNames()+")")
	adstapBin := fs.String("adstap", "", "the adstap `binary` W7's sidecar paths run (default: adstap beside this program, where make bench builds it)")
	w5Streams := fs.Int("w5-streams", 0, "streams held open in W5 (default 2000)")
	w5Sources := fs.Int("w5-sources", 0, "loopback addresses W5's clients connect from, 127.0.0.1 onwards (default 1)")
	out := fs.String("out", "docs/performance.md", "write the report into this markdown `file` (between its markers); empty: stdout only. A partial run (-quick, -reps, -workloads) writes it only when -out is given")
	profile := fs.String("profile", "", "write a CPU and a heap profile of each middle's measured window into `dir`")
	memRate := fs.Int("memprofilerate", 0, "with -profile: sample one allocation per `bytes` in the middles' heap profiles (1: every allocation; 0: Go's default)")
	execTrace := fs.String("trace", "", "write an execution trace of each middle's measured window into `dir`")
	codecBench := fs.Bool("codec", true, "also run the codec micro-benchmark (go test -bench DecodeCDS10MB ./codec/)")
	goCmd := fs.String("go", "go", "the go `command` for the codec micro-benchmark")
	commit := fs.String("commit", "", "the source `commit` to report (default: ask git)")
	quietWait := fs.Duration("quiet-wait", 15*time.Second, "before each run, wait up to this `long` for other processes on the machine to go quiet (0: do not wait)")
	quietTotal := fs.Duration("quiet-total", 4*time.Minute, "wait for quiet at most this `long` in all")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "adstap-bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	partial := set["quick"] || set["reps"] || set["workloads"] || set["paths"] || set["w5-streams"] || set["w5-sources"]
	if partial && !set["out"] {
		*out = ""
	}
	command := "make bench"
	if len(args) > 0 {
		command = "adstap-bench " + strings.Join(args, " ")
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "adstap-bench: %v\n", err)
		return 1
	}
	for _, dir := range []string{*profile, *execTrace} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintf(stderr, "adstap-bench: %v\n", err)
			return 1
		}
	}
	// W1 runs are short and vary the most: more of them. W2's each last
	// 90 rounds (9 s), so that each holds the collections the middle makes
	// at its pace (a 3 s one held none or one, and its p99 moved with
	// which); five of them, pooled, so that its p99 rests on ten or so of
	// the moments a collection or the machine makes a few dozen pushes
	// late, not on three.
	sizes, repsOf := benchmark.FullSizes(), map[string]int{"W1": 9, "W2": 5, "W3": 3, "W4": 5, "W5": 3, "W6": 5, "W7": 3}
	if *quick {
		sizes, repsOf = benchmark.QuickSizes(), map[string]int{"W1": 1, "W2": 1, "W3": 1, "W4": 1, "W5": 1, "W6": 1, "W7": 1}
	}
	if *w5Streams > 0 {
		sizes.W5Streams = *w5Streams
	}
	if *w5Sources > 0 {
		sizes.W5Sources = *w5Sources
	}
	// No -paths: each workload's own (benchmark.PathsOf).
	var selected []benchmark.Path
	if *paths != "" {
		for _, name := range strings.Split(*paths, ",") {
			p := benchmark.Path(strings.TrimSpace(name))
			if !slices.Contains(benchmark.Paths, p) {
				fmt.Fprintf(stderr, "adstap-bench: -paths: unknown path %q (want %s)\n", p, pathNames())
				return 2
			}
			selected = append(selected, p)
		}
	}
	if *reps > 0 {
		for id := range repsOf {
			repsOf[id] = *reps
		}
	}
	want := map[string]bool{}
	for _, id := range strings.Split(*only, ",") {
		id = strings.ToUpper(strings.TrimSpace(id))
		if _, ok := repsOf[id]; !ok {
			fmt.Fprintf(stderr, "adstap-bench: -workloads: unknown workload %q (want one of %s)\n", id, strings.Join(benchmark.WorkloadIDs, ", "))
			return 2
		}
		want[id] = true
	}
	if err := benchmark.CheckFileLimit(sizes, want); err != nil {
		fmt.Fprintf(stderr, "adstap-bench: %v\n", err)
		return 1
	}
	if *adstapBin == "" {
		*adstapBin = filepath.Join(filepath.Dir(exe), "adstap")
	}
	if _, err := os.Stat(*adstapBin); err != nil && want["W7"] {
		fmt.Fprintf(stderr, "adstap-bench: W7 runs the adstap binary: %v (go build -o %s ./cmd/adstap, or -adstap)\n", err, *adstapBin)
		return 1
	}
	child := benchmark.ChildConfig{Command: []string{exe}, ProfileDir: *profile, MemProfileRate: *memRate, TraceDir: *execTrace, Stderr: stderr, Adstap: *adstapBin}
	var label string
	quiet := &benchmark.Quiet{PerRun: *quietWait, Total: *quietTotal}
	all := &benchmark.Runs{Results: map[string]map[benchmark.Path][]benchmark.Result{}}
	for _, id := range benchmark.WorkloadIDs {
		if !want[id] {
			continue
		}
		// One workload's messages at a time: the load generator's heap
		// stays small, and so do its garbage collections.
		w := benchmark.NewWorkload(id, sizes)
		n := repsOf[id]
		runs, err := benchmark.Run(ctx, benchmark.RunConfig{
			Workloads: []benchmark.Workload{w},
			Paths:     selected,
			Reps:      n,
			Start: func(p benchmark.Path, l string) benchmark.StartMiddle {
				label = l
				return benchmark.Child(child, p, func() string { return label })
			},
			Progress: stderr,
			Quiet:    quiet,
		})
		if err != nil {
			fmt.Fprintf(stderr, "adstap-bench: %v\n", err)
			return 1
		}
		all.Workloads = append(all.Workloads, runs.Workloads...)
		all.Results[w.ID()] = runs.Results[w.ID()]
		all.Reps = max(all.Reps, n)
		all.Took += runs.Took
	}
	report := &benchmark.Report{Runs: all, Machine: benchmark.ThisMachine(*commit), Command: command}
	if *codecBench {
		fmt.Fprintf(stderr, "adstap-bench: codec micro-benchmark (go test -bench DecodeCDS10MB -cpu 1 ./codec/)\n")
		count := 5
		if *quick {
			count = 2
		}
		c, err := benchmark.RunCodecBench(*goCmd, ".", count)
		if err != nil {
			report.CodecErr = err
			fmt.Fprintf(stderr, "adstap-bench: %v\n", err)
		} else {
			report.Codec = &c
		}
	}
	md := report.Markdown()
	fmt.Fprintln(stdout, md)
	if *out != "" {
		if err := benchmark.WriteDoc(*out, md); err != nil {
			fmt.Fprintf(stderr, "adstap-bench: %v\n", err)
			return 1
		}
		abs, _ := filepath.Abs(*out)
		fmt.Fprintf(stderr, "adstap-bench: report written to %s\n", abs)
	}
	return 0
}

func pathNames() string {
	var names []string
	for _, p := range benchmark.Paths {
		names = append(names, string(p))
	}
	return strings.Join(names, ",")
}
