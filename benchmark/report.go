package benchmark

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"time"
)

// Report is a harness run made readable: the table, the targets and the
// machine.
type Report struct {
	Runs     *Runs
	Codec    *CodecResult // nil when not run
	CodecErr error
	Machine  Machine
	Command  string // how the run was started
}

// Target is one of the performance targets and how the run did.
type Target struct {
	What, Want, Got string
	Met             bool
	Known           bool // false when the run did not measure it
}

func (r *Report) summary(id string, p Path) (summary, bool) {
	if r.Runs == nil {
		return summary{}, false
	}
	res := r.Runs.Results[id][p]
	if len(res) == 0 {
		return summary{}, false
	}
	return summarize(res), true
}

// paired is the median, over the repetitions, of metric on path a over
// metric on path b in the same repetition. The paths of one repetition run
// back to back, so pairing them cancels the machine's slower drifts (the
// speed of loopback itself varies by ±20 % over minutes on a VM).
func (r *Report) paired(id string, a, b Path, metric func(Result) float64) float64 {
	ra, rb := r.Runs.Results[id][a], r.Runs.Results[id][b]
	var v []float64
	for i := range min(len(ra), len(rb)) {
		if d := metric(rb[i]); d != 0 {
			v = append(v, metric(ra[i])/d)
		}
	}
	return median(v)
}

// addedP99 is W2's p99 latency over path p less the direct path's, each
// over every repetition's pushes together.
func (r *Report) addedP99(p Path) time.Duration { return r.added(p, 0.99) }

// added is addedP99 for the q-quantile. The quantile is of all the
// repetitions' pushes pooled, not a median of each repetition's: W2's tail
// is made by a few events in a repetition (a collection in the middle
// makes a hundred slow pushes at once, a stall of the machine a dozen), so
// a repetition's p99 is set by whether one fell in its window, and pooling
// counts every event once, in proportion to how often it comes.
func (r *Report) added(p Path, q float64) time.Duration {
	return percentile(pooled(r.Runs.Results["W2"][p]), q) - percentile(pooled(r.Runs.Results["W2"][Direct]), q)
}

// pooled is every repetition's latencies together.
func pooled(rs []Result) []time.Duration {
	var all []time.Duration
	for _, r := range rs {
		all = append(all, r.Latencies...)
	}
	return all
}

// addedRatio is what path p adds to W2's q-quantile over what the relay
// adds, or a phrase saying there is no ratio.
func (r *Report) addedRatio(p Path, q float64) (ratio float64, text string) {
	a, b := r.added(p, q), r.added(Relay, q)
	if b <= 0 {
		// A relay that added nothing (or less than nothing: the direct
		// path's own tail in that run) leaves no ratio.
		return math.Inf(1), "no ratio: the relay added nothing"
	}
	ratio = float64(a) / float64(b)
	return ratio, fmt.Sprintf("%.2f×", ratio)
}

func wallOf(r Result) float64 { return float64(r.Wall) }
func cpuOf(r Result) float64  { return float64(r.Middle.CPU) }

// cpuPerByteOf is the middle's CPU per byte pushed in the window.
func cpuPerByteOf(r Result) float64 {
	if r.Bytes == 0 {
		return 0
	}
	return float64(r.Middle.CPU) / float64(r.Bytes)
}
func peakOf(r Result) float64 { return float64(r.Middle.PeakRSS) }

// perStreamOf is an idle workload's resident memory per stream.
func perStreamOf(r Result) float64 {
	if r.Streams == 0 {
		return 0
	}
	return float64(r.Settled.RSS-r.Idle.RSS) / float64(r.Streams)
}

// footprintOf is W7's memory of the i-th push, as of says.
func footprintOf(i int, of func(Footprint) int64) func(Result) float64 {
	return func(r Result) float64 {
		if i >= len(r.Footprints) {
			return 0
		}
		return float64(of(r.Footprints[i]))
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// targets checks the run against the performance targets.
func (r *Report) targets() []Target {
	var ts []Target
	add := func(what, want string, known bool, got string, met bool) {
		if !known {
			got, met = "not measured", false
		}
		ts = append(ts, Target{What: what, Want: want, Got: got, Met: met, Known: known})
	}
	// The tap is `adstap run` as shipped (its default flags), measured
	// against the relays it stands among.
	_, okTap := r.summary("W1", Tap)
	_, okTyped := r.summary("W1", Typed)
	_, okRelay1 := r.summary("W1", Relay)
	perMB := r.paired("W1", Tap, Relay, cpuPerByteOf)
	add("W1 middle CPU per MB pushed, tap as shipped / pass-through relay", "≤ 1.3×", okRelay1 && okTap, fmt.Sprintf("%.2f×", perMB), perMB <= 1.3)
	t := r.paired("W1", Typed, Tap, cpuOf)
	add("W1 middle CPU, typed relay / tap as shipped", "≥ 1.6×", okTyped && okTap, fmt.Sprintf("%.2f×", t), t >= 1.6)

	dir, okDir := r.summary("W2", Direct)
	full2, okFull2 := r.summary("W2", Tap)
	added := r.addedP99(Tap)
	add("W2 added p99 latency, tap as shipped − direct", "≤ 1 ms", okDir && okFull2,
		fmt.Sprintf("%s (p99 %s vs %s)", fmtSignedDur(added), fmtDur(full2.P99), fmtDur(dir.P99)), added <= time.Millisecond)

	relay2, okRelay2 := r.summary("W2", Relay)
	addedRelay := r.addedP99(Relay)
	p99, p99Text := r.addedRatio(Tap, 0.99)
	add("W2 added p99 latency, tap as shipped / pass-through relay", "≤ 1.5×", okDir && okFull2 && okRelay2,
		fmt.Sprintf("%s (%s vs %s; p99 %s vs %s)", p99Text, fmtSignedDur(added), fmtSignedDur(addedRelay), fmtDur(full2.P99), fmtDur(relay2.P99)),
		p99 <= 1.5 || added <= 0)
	p50, p50Text := r.addedRatio(Tap, 0.50)
	add("W2 added p50 latency, tap as shipped / pass-through relay", "≤ 1.3×", okDir && okFull2 && okRelay2,
		fmt.Sprintf("%s (%s vs %s; p50 %s vs %s)", p50Text, fmtSignedDur(r.added(Tap, 0.5)), fmtSignedDur(r.added(Relay, 0.5)), fmtDur(full2.P50), fmtDur(relay2.P50)),
		p50 <= 1.3 || r.added(Tap, 0.5) <= 0)

	full3, okFull3 := r.summary("W3", Tap)
	relay3, okRelay3 := r.summary("W3", Relay)
	m3 := r.paired("W3", Tap, Relay, perStreamOf)
	add("W3 RSS per idle synced stream, tap as shipped / pass-through relay", "≤ 1.1×", okFull3 && okRelay3,
		fmt.Sprintf("%.2f× (%.0f KB vs %.0f KB)", m3, full3.PerStreamRSS/1e3, relay3.PerStreamRSS/1e3), m3 <= 1.1)
	add("W3 RSS per idle synced stream, tap as shipped", "≤ 200 KB", okFull3,
		fmt.Sprintf("%.0f KB", full3.PerStreamRSS/1e3), full3.PerStreamRSS <= 200e3)

	full5, okFull5 := r.summary("W5", Tap)
	relay5, okRelay5 := r.summary("W5", Relay)
	m5 := r.paired("W5", Tap, Relay, perStreamOf)
	add("W5 RSS per idle synced stream, tap as shipped / pass-through relay", "≤ 0.80×", okFull5 && okRelay5,
		fmt.Sprintf("%.2f× (%.0f KB vs %.0f KB)", m5, full5.PerStreamRSS/1e3, relay5.PerStreamRSS/1e3), m5 <= 0.80)

	full6, okFull6 := r.summary("W6", Tap)
	relay6, okRelay6 := r.summary("W6", Relay)
	c6 := r.paired("W6", Tap, Relay, wallOf)
	add("W6 fan-out convergence (first send → last ACK), tap as shipped / pass-through relay", "≤ 1.10×", okFull6 && okRelay6,
		fmt.Sprintf("%.2f× (%s vs %s)", c6, fmtDur(full6.Wall), fmtDur(relay6.Wall)), c6 <= 1.10)
	add("W6 pushes not kept for their answer after the fan-out, tap as shipped (adstap_nack_not_kept_total)", "0", okFull6,
		fmt.Sprintf("%d at most in a run (median %d)", full6.NACKNotKeptMax, full6.NACKNotKept), full6.NACKNotKeptMax == 0)
	add("W6 streams no longer checked for references after the fan-out, tap as shipped (dropped by the check's queue + stopped)", "0", okFull6,
		fmt.Sprintf("%d dropped, %d stopped, at most in a run", full6.RefsDroppedMax, full6.RefsStoppedMax), full6.RefsDroppedMax == 0 && full6.RefsStoppedMax == 0)

	relay7, okRelay7 := r.summary("W7", Relay)
	side7, okSide7 := r.summary("W7", Sidecar)
	if !okRelay7 || !okSide7 {
		add("W7 RSS after sync, at the peak and after idle, one stream's large CDS push, adstap with the template's flags (capture on) / pass-through relay", "≤ 1.3×", false, "", false)
	}
	// An idle adstap is measured as it ships, from outside: the binary,
	// started with the template's flags, before its proxy connects (W7
	// starts it afresh for each push). The W3 middles are the benchmark's
	// own process, which links the typed relay too.
	var started []int64
	for _, f := range side7.Footprints {
		started = append(started, f.Started)
	}
	idle := median(started)
	add("W7 RSS of an idle adstap with no streams, the binary with the template's flags, before its stream", "≤ 30 MB", okSide7 && len(started) > 0,
		fmt.Sprintf("%.1f MB (%s)", float64(idle)/1e6, fmtBytes(idle)), idle <= 30e6)
	for i, f := range relay7.Footprints {
		if !okSide7 || i >= len(side7.Footprints) {
			break
		}
		s := side7.Footprints[i]
		for _, when := range []struct {
			name  string
			of    func(Footprint) int64
			a, b  int64
			bound float64
		}{
			{"after sync", func(f Footprint) int64 { return f.Synced.RSS }, s.Synced, f.Synced, 1.3},
			{"at the peak", func(f Footprint) int64 { return f.Peak }, s.Peak, f.Peak, 1.5},
			{"after idle", func(f Footprint) int64 { return f.Idle.RSS }, s.Idle, f.Idle, 1.3},
		} {
			m := r.paired("W7", Sidecar, Relay, footprintOf(i, when.of))
			add(fmt.Sprintf("W7 RSS %s, one stream's %s CDS push, adstap with the template's flags (capture and reference check on) / pass-through relay", when.name, sizeMB(f.PushBytes)),
				fmt.Sprintf("≤ %.1f×", when.bound), okRelay7 && okSide7, fmt.Sprintf("%.2f× (%s vs %s)", m, fmtBytes(when.a), fmtBytes(when.b)), m <= when.bound)
		}
	}

	if r.Codec != nil {
		gbs := r.Codec.MBPerSec / 1000
		add("Codec: envelope scan + per-resource hashes of a 10 MB CDS response, one core", "≥ 2 GB/s", true,
			fmt.Sprintf("%.1f GB/s", gbs), gbs >= 2)
		perRes := r.Codec.AllocsPerOp / float64(r.Codec.Resources)
		add("Codec: allocations per resource", "0", true,
			fmt.Sprintf("%.0f allocs per 10,000-resource response (%.4f per resource)", r.Codec.AllocsPerOp, perRes), r.Codec.AllocsPerOp < 10)
	} else {
		add("Codec: envelope scan + per-resource hashes of a 10 MB CDS response, one core", "≥ 2 GB/s", false, "", false)
	}
	return ts
}

func fmtSignedDur(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

// Markdown is the report as the markdown docs/performance.md carries.
func (r *Report) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Measured %s on %s; commit %s.  \n", m.Date.Format("2006-01-02 15:04 MST"), m.String(), orDash(m.Commit))
	if r.Runs != nil {
		var reps []string
		for _, w := range r.Runs.Workloads {
			reps = append(reps, fmt.Sprintf("%s %d", w.ID, w.Reps))
		}
		fmt.Fprintf(&b, "`%s`: each workload over each path, the paths alternated, repeated (%s times); medians. The measurements took %s.\n\n",
			r.Command, strings.Join(reps, ", "), r.Runs.Took.Round(time.Second))
	}

	b.WriteString("### Targets\n\n| target | want | measured | |\n|---|---|---|---|\n")
	for _, t := range r.targets() {
		verdict := "**missed**"
		switch {
		case !t.Known:
			verdict = "–"
		case t.Met:
			verdict = "met"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.What, t.Want, t.Got, verdict)
	}

	if relay, ok := r.summary("W1", Relay); ok {
		tap, _ := r.summary("W1", Tap)
		lean, _ := r.summary("W1", TapLean)
		typed, _ := r.summary("W1", Typed)
		if relay.Pushes > 0 && tap.N > 0 && lean.N > 0 && typed.N > 0 {
			per := func(d time.Duration) time.Duration { return d / time.Duration(relay.Pushes) }
			fmt.Fprintf(&b, "\nIn W1, per 10 MB push, the pass-through relay costs %s of CPU; adstap as shipped adds %s (tap − relay), of which %s are the outputs on by default that tap-lean leaves off (tap − tap-lean); unmarshalling and re-marshalling adds %s (typed − relay). The tap's observation costs %.2f× what re-marshalling does.\n",
				fmtDur(per(relay.CPU)), fmtDur(per(tap.CPU-relay.CPU)), fmtDur(per(tap.CPU-lean.CPU)), fmtDur(per(typed.CPU-relay.CPU)), ratio(float64(tap.CPU-relay.CPU), float64(typed.CPU-relay.CPU)))
		}
	}

	if r.Runs != nil {
		b.WriteString("\n### Every workload over every path\n\n")
		b.WriteString("Wall is the measured phase as the clients saw it; middle CPU (user + system, from getrusage) and peak RSS (VmHWM, reset at the phase's start) are the middle process's own, so the direct path has none. ")
		b.WriteString("±: half the range of the repetitions, relative to the median. Ratios are medians of the ratios within each repetition.\n\n")
		b.WriteString("| workload | path | wall | wall / direct | middle CPU | peak RSS | tap / tap-lean: wall · CPU · peak RSS | detail |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---|---|\n")
		for _, w := range r.Runs.Workloads {
			id := w.ID
			for _, p := range Paths {
				s, ok := r.summary(id, p)
				if !ok {
					continue
				}
				cpu, peak, vsOff := "–", "–", ""
				if p != Direct {
					cpu = fmt.Sprintf("%s ±%.0f%%", fmtDur(s.CPU), 100*s.CPUSpread)
					peak = fmtBytes(s.PeakRSS)
				}
				if _, lean := r.summary(id, TapLean); p == Tap && lean {
					vsOff = fmt.Sprintf("%.2f× · %.2f× · %.2f×", r.paired(id, Tap, TapLean, wallOf),
						r.paired(id, Tap, TapLean, cpuOf), r.paired(id, Tap, TapLean, peakOf))
				}
				vsDirect := "–"
				if _, ok := r.summary(id, Direct); ok {
					vsDirect = fmt.Sprintf("%.2f×", r.paired(id, p, Direct, wallOf))
				}
				fmt.Fprintf(&b, "| %s | %s | %s ±%.0f%% | %s | %s | %s | %s | %s |\n",
					id, p, fmtDur(s.Wall), 100*s.WallSpread, vsDirect, cpu, peak, vsOff, r.detail(id, p, s))
			}
		}
		var quiet []string
		for _, w := range r.Runs.Workloads {
			var med, top float64
			for _, p := range Paths {
				if s, ok := r.summary(w.ID, p); ok {
					med, top = max(med, s.OthersMedian), max(top, s.OthersMax)
				}
			}
			quiet = append(quiet, fmt.Sprintf("%s %.0f%% (at most %.0f%%)", w.ID, 100*med, 100*top))
		}
		fmt.Fprintf(&b, "\nOther processes on the machine used, during the measured windows, a median of: %s of a core.\n", strings.Join(quiet, ", "))
		b.WriteString("\nWorkloads:\n\n")
		for _, w := range r.Runs.Workloads {
			fmt.Fprintf(&b, "- **%s**: %s.\n", w.ID, w.Description)
		}
	}

	if relay, ok := r.summary("W7", Relay); ok {
		b.WriteString(r.footprintTable(relay))
	}

	if r.Codec != nil {
		c := r.Codec
		fmt.Fprintf(&b, "\n### Codec micro-benchmark\n\n`go test -run '^$' -bench '^BenchmarkDecodeCDS10MB$' -benchmem -cpu 1 -count %d ./codec/`, median of %d:\n\n", c.Runs, c.Runs)
		b.WriteString("| benchmark | throughput | time per 10 MB response | B/op | allocs/op |\n|---|---:|---:|---:|---:|\n")
		fmt.Fprintf(&b, "| DecodeCDS10MB (one core) | %.2f GB/s | %s | %.0f | %.0f |\n", c.MBPerSec/1000, fmtDur(time.Duration(c.NsPerOp)), c.BytesPerOp, c.AllocsPerOp)
	} else if r.CodecErr != nil {
		fmt.Fprintf(&b, "\nThe codec micro-benchmark failed: %v\n", r.CodecErr)
	}
	return b.String()
}

func (r *Report) detail(id string, p Path, s summary) string {
	switch id {
	case "W1", "W4":
		return fmt.Sprintf("%s per push", fmtDur(s.PerPush))
	case "W2":
		out := fmt.Sprintf("latency p50 %s, p99 %s", fmtDur(s.P50), fmtDur(s.P99))
		if p != Direct {
			unit := "collections"
			if s.GCs == 1 {
				unit = "collection"
			}
			out += fmt.Sprintf(" (p99 %s vs direct); %d %s per repetition", fmtSignedDur(r.addedP99(p)), s.GCs, unit)
		}
		return out
	case "W3", "W5":
		if p == Direct {
			return fmt.Sprintf("sync of %d streams", s.Streams)
		}
		return fmt.Sprintf("RSS idle %s → %s synced: **%.0f KB per stream** (%.0f KB live, after a forced GC); %.0f goroutines and %.0f FDs per stream",
			fmtBytes(s.IdleRSS), fmtBytes(s.SettledRSS), s.PerStreamRSS/1e3, s.PerStreamLive/1e3, s.PerStreamGoroutines, s.PerStreamFDs)
	case "W6":
		out := fmt.Sprintf("**converged in %s** (first send → last ACK); per stream p50 %s, p99 %s", fmtDur(s.Wall), fmtDur(s.P50), fmtDur(s.P99))
		if isTap(p) {
			out += fmt.Sprintf("; pushes not kept %d, streams no longer checked for references %d", s.NACKNotKept, s.RefsDropped+s.RefsStopped)
		}
		return out
	case "W7":
		var parts []string
		for _, f := range s.Footprints {
			parts = append(parts, fmt.Sprintf("%s: RSS **%s** synced, **%s** idle (peak %s)", sizeMB(f.PushBytes), fmtBytes(f.Synced), fmtBytes(f.Idle), fmtBytes(f.Peak)))
		}
		return strings.Join(parts, "; ")
	}
	return ""
}

// footprintTable is W7 as the sidecar's cost: per push size, the relay's
// RSS against adstap's, with and without its capture.
func (r *Report) footprintTable(relay summary) string {
	var b strings.Builder
	b.WriteString("\n### W7: the sidecar's footprint\n\n")
	b.WriteString("One proxy's stream, synced with one CDS push and ACKed, then idle; a middle started afresh for each push. adstap is the binary itself, with the injection template's flags and environment and GOMEMLIMIT as the template's memory limit gives it (internal/gctune). RSS after sync is read once the upstream has the ACK (adstap may still be observing the push then); the peak is the highest RSS from the middle's start to the end of the idle time (VmHWM), what a container's memory limit is judged against; after idle, once the stream has been idle for the workload's idle time. Ratios are medians of the ratios within each repetition.\n\n")
	b.WriteString("| CDS push | adstap | relay RSS synced · idle | adstap RSS synced · idle | ratio synced · idle | peak RSS relay · adstap | ratio at the peak |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, p := range []struct {
		path Path
		name string
	}{{Sidecar, "template's flags"}, {SidecarNoCapture, "without --capture"}} {
		s, ok := r.summary("W7", p.path)
		if !ok {
			continue
		}
		for i, f := range relay.Footprints {
			if i >= len(s.Footprints) {
				break
			}
			t := s.Footprints[i]
			synced := r.paired("W7", p.path, Relay, footprintOf(i, func(f Footprint) int64 { return f.Synced.RSS }))
			idle := r.paired("W7", p.path, Relay, footprintOf(i, func(f Footprint) int64 { return f.Idle.RSS }))
			peak := r.paired("W7", p.path, Relay, footprintOf(i, func(f Footprint) int64 { return f.Peak }))
			fmt.Fprintf(&b, "| %s | %s | %s · %s | %s · %s | %.2f× · %.2f× | %s · %s | %.2f× |\n", sizeMB(f.PushBytes), p.name,
				fmtBytes(f.Synced), fmtBytes(f.Idle), fmtBytes(t.Synced), fmtBytes(t.Idle), synced, idle, fmtBytes(f.Peak), fmtBytes(t.Peak), peak)
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// The generated part of docs/performance.md sits between these markers;
// the rest of the page (the analysis) is kept as it is.
const (
	beginMarker = "<!-- BEGIN adstap-bench: generated by `make bench`; edits here are overwritten -->"
	endMarker   = "<!-- END adstap-bench -->"
)

// The comparison's table (`make bench-compare`) has markers of its own.
const (
	compareBeginMarker = "<!-- BEGIN adstap-bench compare: generated by `make bench-compare`; edits here are overwritten -->"
	compareEndMarker   = "<!-- END adstap-bench compare -->"
)

// WriteDoc puts the report into the page at path, between the markers,
// keeping everything else. A page without markers gets them appended.
func WriteDoc(path, markdown string) error {
	return writeBetween(path, beginMarker, endMarker, markdown)
}

// WriteCompareDoc puts a comparison into the page at path, between its
// markers, as WriteDoc does.
func WriteCompareDoc(path, markdown string) error {
	return writeBetween(path, compareBeginMarker, compareEndMarker, markdown)
}

func writeBetween(path, beginMarker, endMarker, markdown string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	block := beginMarker + "\n" + markdown + endMarker
	var out []byte
	i, j := bytes.Index(old, []byte(beginMarker)), bytes.Index(old, []byte(endMarker))
	switch {
	case i >= 0 && j > i:
		out = append(append(append(out, old[:i]...), block...), old[j+len(endMarker):]...)
	case len(old) == 0:
		out = []byte("# Performance\n\n" + block + "\n")
	default:
		out = append(append(bytes.TrimRight(old, "\n"), "\n\n"...), block+"\n"...)
	}
	return os.WriteFile(path, out, 0o644)
}
