package benchmark

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ComparePaths are the paths of `adstap-bench compare`: two adstap binaries
// and the pass-through relay beside them in every round; W2 adds the
// direct path, which its added latency is measured from.
func ComparePaths(id string) []Path {
	if id == "W2" {
		return []Path{Direct, Relay, Head, Base}
	}
	return []Path{Relay, Head, Base}
}

// CompareWorkloads are the workloads a comparison runs by default: the
// hot path's CPU (W1), latency (W2), a fan-out to many proxies (W6) and a
// sidecar's memory (W7).
var CompareWorkloads = []string{"W1", "W2", "W6", "W7"}

// Comparison is a compare run made readable: per measure, the head binary
// over the base binary, round by round, and each over the relay.
type Comparison struct {
	Runs               *Runs
	Machine            Machine
	HeadName, BaseName string
	Command            string
}

// measure is one figure a comparison puts side by side: value reads it from
// one round's result of a path (ok false when the round has none).
type measure struct {
	id, name string
	value    func(c *Comparison, p Path, round int) (float64, bool)
	format   func(float64) string
}

func (c *Comparison) result(id string, p Path, round int) (Result, bool) {
	rs := c.Runs.Results[id][p]
	if round >= len(rs) {
		return Result{}, false
	}
	return rs[round], true
}

// of makes a measure's value from a function of one result.
func of(id string, f func(Result) float64) func(*Comparison, Path, int) (float64, bool) {
	return func(c *Comparison, p Path, round int) (float64, bool) {
		r, ok := c.result(id, p, round)
		if !ok {
			return 0, false
		}
		v := f(r)
		return v, v > 0
	}
}

// addedP99 is W2's p99 over p less the direct path's in the same round.
func addedP99(c *Comparison, p Path, round int) (float64, bool) {
	r, ok := c.result("W2", p, round)
	d, okd := c.result("W2", Direct, round)
	if !ok || !okd {
		return 0, false
	}
	v := float64(percentile(r.Latencies, 0.99) - percentile(d.Latencies, 0.99))
	return v, v > 0
}

func (c *Comparison) measures() []measure {
	dur := func(v float64) string { return fmtDur(time.Duration(v)) }
	perMB := func(v float64) string { return fmtDur(time.Duration(v*1e6)) + "/MB" }
	size := func(v float64) string { return fmtBytes(int64(v)) }
	ms := []measure{
		{"W1", "middle CPU per MB pushed", of("W1", cpuPerByteOf), perMB},
		{"W2", "added p99 latency (over direct)", addedP99, dur},
		{"W6", "fan-out, first send → last ACK", of("W6", wallOf), dur},
		{"W6", "middle CPU per MB pushed", of("W6", cpuPerByteOf), perMB},
	}
	if rs := c.Runs.Results["W7"][Relay]; len(rs) > 0 {
		for i, f := range rs[0].Footprints {
			ms = append(ms,
				measure{"W7", fmt.Sprintf("peak RSS, %s CDS push", sizeMB(f.PushBytes)), of("W7", footprintOf(i, func(f Footprint) int64 { return f.Peak })), size},
				measure{"W7", fmt.Sprintf("RSS after sync, %s CDS push", sizeMB(f.PushBytes)), of("W7", footprintOf(i, func(f Footprint) int64 { return f.Synced.RSS })), size})
		}
	}
	return ms
}

// ratios are a over b in each round where both were measured.
func (c *Comparison) ratios(m measure, a, b Path) []float64 {
	var out []float64
	for round := range c.Runs.Reps {
		va, oka := m.value(c, a, round)
		vb, okb := m.value(c, b, round)
		if oka && okb {
			out = append(out, va/vb)
		}
	}
	return out
}

func (c *Comparison) values(m measure, p Path) []float64 {
	var out []float64
	for round := range c.Runs.Reps {
		if v, ok := m.value(c, p, round); ok {
			out = append(out, v)
		}
	}
	return out
}

// fmtRatios is the median of rs with their range, e.g. "0.97× (0.91–1.04)".
func fmtRatios(rs []float64) string {
	if len(rs) == 0 {
		return "–"
	}
	if len(rs) == 1 {
		return fmt.Sprintf("%.2f×", rs[0])
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", median(rs), slices.Min(rs), slices.Max(rs))
}

// Markdown is the comparison's table, the losses W6 counted, and the load
// the rest of the machine put on it.
func (c *Comparison) Markdown() string {
	var b strings.Builder
	m := c.Machine
	fmt.Fprintf(&b, "Measured %s on %s; head %s, base %s.  \n", m.Date.Format("2006-01-02 15:04 MST"), m.String(), c.HeadName, c.BaseName)
	var reps []string
	for _, w := range c.Runs.Workloads {
		reps = append(reps, w.ID)
	}
	fmt.Fprintf(&b, "`%s`: %s, %d rounds, each running the relay, head and base back to back in a rotated order; each binary with its default flags. The measurements took %s.\n\n",
		c.Command, strings.Join(reps, ", "), c.Runs.Reps, c.Runs.Took.Round(time.Second))
	b.WriteString("Ratios are medians over the rounds of the ratio within each round (range in brackets); figures are medians; W2's pooled row is each path's p99 over the pushes of every round, as make bench takes it. Lower is better throughout.\n\n")
	b.WriteString("| workload | measure | head / base | head / relay | base / relay | head | base | relay |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, ms := range c.measures() {
		if len(c.Runs.Results[ms.id]) == 0 {
			continue
		}
		fig := func(p Path) string {
			v := c.values(ms, p)
			if len(v) == 0 {
				return "–"
			}
			return ms.format(median(v))
		}
		fmt.Fprintf(&b, "| %s | %s | **%s** | %s | %s | %s | %s | %s |\n", ms.id, ms.name,
			fmtRatios(c.ratios(ms, Head, Base)), fmtRatios(c.ratios(ms, Head, Relay)), fmtRatios(c.ratios(ms, Base, Relay)),
			fig(Head), fig(Base), fig(Relay))
		if ms.id == "W2" {
			c.writePooledW2(&b)
		}
	}
	if w6 := c.Runs.Results["W6"]; len(w6) > 0 {
		b.WriteString("\nAfter each W6 fan-out, from each binary's /metrics and log (median, most of a round):\n\n")
		b.WriteString("| binary | pushes not kept for their answer (adstap_nack_not_kept_total) | reference check: frames dropped (adstap_output_dropped_total{output=\"references\"}) | streams no longer checked (log) |\n|---|---:|---:|---:|\n")
		for _, p := range []Path{Head, Base} {
			if len(w6[p]) == 0 {
				continue
			}
			s := summarize(w6[p])
			fmt.Fprintf(&b, "| %s | %d (%d) | %d (%d) | %d (%d) |\n", p, s.NACKNotKept, s.NACKNotKeptMax, s.RefsDropped, s.RefsDroppedMax, s.RefsStopped, s.RefsStoppedMax)
		}
	}
	var load []string
	for _, w := range c.Runs.Workloads {
		var med, top float64
		for _, p := range Paths {
			if rs := c.Runs.Results[w.ID][p]; len(rs) > 0 {
				s := summarize(rs)
				med, top = max(med, s.OthersMedian), max(top, s.OthersMax)
			}
		}
		load = append(load, fmt.Sprintf("%s %.0f%% (at most %.0f%%)", w.ID, 100*med, 100*top))
	}
	fmt.Fprintf(&b, "\nOther processes on the machine used, during the measured windows, a median of: %s of a core.\n", strings.Join(load, ", "))
	return b.String()
}

// writePooledW2 writes W2's row of each path's p99 over the pushes of every
// round.
func (c *Comparison) writePooledW2(b *strings.Builder) {
	w2 := c.Runs.Results["W2"]
	if len(w2[Direct]) == 0 {
		return
	}
	// One window's p99 is its worst 1 %: a pause of the machine's of
	// a tenth of a second sets it, whatever path is measured. Pooled
	// over the rounds, as make bench pools its repetitions, a pause
	// weighs what its share of the pushes is.
	added := func(p Path) float64 {
		if len(w2[p]) == 0 {
			return 0
		}
		return float64(percentile(pooled(w2[p]), 0.99) - percentile(pooled(w2[Direct]), 0.99))
	}
	ratio := func(x, y Path) string {
		va, vb := added(x), added(y)
		if va <= 0 || vb <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", va/vb)
	}
	fig := func(p Path) string {
		if v := added(p); v > 0 {
			return fmtDur(time.Duration(v))
		}
		return "–"
	}
	fmt.Fprintf(b, "| W2 | added p99 latency, every round's pushes pooled | **%s** | %s | %s | %s | %s | %s |\n",
		ratio(Head, Base), ratio(Head, Relay), ratio(Base, Relay), fig(Head), fig(Base), fig(Relay))
}
