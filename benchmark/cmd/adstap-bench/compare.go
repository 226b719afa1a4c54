package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/adstap/adstap/benchmark"
)

// compare alternates two adstap binaries, each with its default flags,
// with the pass-through relay beside them in every round, through W1, W2,
// W6 and W7, and prints head/base ratios (`make bench-compare`).
func compare(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("adstap-bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	head := fs.String("head", "", "the head adstap `binary` (required)")
	base := fs.String("base", "", "the base adstap `binary` (required)")
	headName := fs.String("head-name", "head", "what to call the head `binary` in the report (its commit)")
	baseName := fs.String("base-name", "base", "what to call the base `binary` in the report (its commit)")
	rounds := fs.Int("rounds", 0, "rounds: each runs every workload over the relay, head and base (default 5; 2 with -quick)")
	quick := fs.Bool("quick", false, "a short run: fewer pushes, 2 rounds (a few minutes)")
	only := fs.String("workloads", strings.Join(benchmark.CompareWorkloads, ","), "`list` of workloads to run")
	out := fs.String("out", "", "also write the table into this markdown `file`, between its compare markers (e.g. docs/performance.md)")
	quietWait := fs.Duration("quiet-wait", 15*time.Second, "before each run, wait up to this `long` for other processes on the machine to go quiet (0: do not wait)")
	quietTotal := fs.Duration("quiet-total", 2*time.Minute, "wait for quiet at most this `long` in all")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *head == "" || *base == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "adstap-bench compare: want -head BIN -base BIN and no arguments\n")
		return 2
	}
	for _, bin := range []string{*head, *base} {
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintf(stderr, "adstap-bench compare: %v\n", err)
			return 1
		}
	}
	sizes, n := benchmark.FullSizes(), 5
	if *quick {
		sizes, n = benchmark.QuickSizes(), 2
	}
	if *rounds > 0 {
		n = *rounds
	}
	var ids []string
	for _, id := range strings.Split(*only, ",") {
		id = strings.ToUpper(strings.TrimSpace(id))
		if benchmark.NewWorkload(id, benchmark.TinySizes()) == nil {
			fmt.Fprintf(stderr, "adstap-bench compare: -workloads: unknown workload %q\n", id)
			return 2
		}
		ids = append(ids, id)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if err := benchmark.CheckFileLimit(sizes, want); err != nil {
		fmt.Fprintf(stderr, "adstap-bench compare: %v\n", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "adstap-bench compare: %v\n", err)
		return 1
	}
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	child := benchmark.ChildConfig{Command: []string{exe}, Stderr: stderr,
		Binaries: map[benchmark.Path]string{benchmark.Head: abs(*head), benchmark.Base: abs(*base)}}
	quiet := &benchmark.Quiet{PerRun: *quietWait, Total: *quietTotal}
	all := &benchmark.Runs{Results: map[string]map[benchmark.Path][]benchmark.Result{}, Reps: n}
	for _, id := range ids {
		w := benchmark.NewWorkload(id, sizes)
		runs, err := benchmark.Run(ctx, benchmark.RunConfig{
			Workloads: []benchmark.Workload{w},
			Paths:     benchmark.ComparePaths(id),
			Reps:      n,
			Start: func(p benchmark.Path, _ string) benchmark.StartMiddle {
				return benchmark.Child(child, p, nil)
			},
			Progress: stderr,
			Quiet:    quiet,
		})
		if err != nil {
			fmt.Fprintf(stderr, "adstap-bench compare: %v\n", err)
			return 1
		}
		all.Workloads = append(all.Workloads, runs.Workloads...)
		all.Results[id] = runs.Results[id]
		all.Took += runs.Took
	}
	c := &benchmark.Comparison{Runs: all, Machine: benchmark.ThisMachine(""), HeadName: *headName, BaseName: *baseName,
		Command: "adstap-bench compare " + strings.Join(args, " ")}
	md := c.Markdown()
	fmt.Fprintln(stdout, md)
	if *out != "" {
		if err := benchmark.WriteCompareDoc(*out, md); err != nil {
			fmt.Fprintf(stderr, "adstap-bench compare: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "adstap-bench compare: table written to %s\n", abs(*out))
	}
	return 0
}
