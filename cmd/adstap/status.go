package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/page"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// exitOutOfSync is `adstap status`'s answer when a proxy is STALE or in
// ERROR: distinct from a failure to ask (1) and from bad flags (2), so a
// probe or a script can tell "the mesh is unwell" from "adstap is".
const exitOutOfSync = 3

type statusFlags struct {
	admin      string
	prometheus string
	jaeger     string
	output     string
	staleAfter time.Duration
	node       string
	// resources and resourceType are --resources and --type (statusresources.go).
	resources    bool
	resourceType string
}

func statusCommand(f *statusFlags) *command {
	c := newCommand("status",
		"adstap status shows, from a running tap, every proxy it relays as istioctl proxy-status does: the control-plane replica serving it, its version, and per type SYNCED, STALE (a push unanswered), ERROR (the proxy NACKed the latest push) or NOT SENT, with how long ago. Problems come first, then each NACK's message, an upstream that cannot be reached, the dangling references (requests that fail although every type is SYNCED: a route to a cluster the proxy does not have, ...) and the detectors that are active. With --prometheus it shows every proxy of every tap that Prometheus scrapes (a sidecar tap each), read with a fixed number of queries.",
		"adstap status [flags]")
	c.group("Where")
	adminFlag(c, &f.admin)
	c.String(&f.prometheus, "prometheus", "", "read every tap Prometheus scrapes instead of one tap's admin address: Prometheus's `URL` (e.g. http://prometheus.istio-system:9090); rows are named pod.namespace from the scrape targets' labels, or by node with --metrics-node-label")
	c.String(&f.jaeger, "jaeger", "", "with --prometheus, Jaeger's query API, `URL` http(s)://HOST:16686 or HOST:16685 (gRPC): each ERROR then shows its NACK's message and Istio object, read from the span its exemplar points to")
	c.String(&f.node, "node", "", "only the proxy with this node `id` (with --prometheus, also its pod.namespace)")
	c.Bool(&f.resources, "resources", false, "list each resource of each proxy instead: its status at the proxy (ACKED, NACKED, REQUESTED, DOES_NOT_EXIST, RECEIVED_ERROR, as CSDS says it), version and age, problems first; needs per-resource tracking in the tap (on unless --initial-fetch-timeout=0)")
	c.String(&f.resourceType, "type", "", "with --resources, only this `type` (cds, eds, lds, rds, sds, or a type URL)")
	c.group("Output")
	c.String(&f.output, "o", "table", "`format`: table, wide (adds stream, protocol, peer, time to full sync) or json")
	f.staleAfter = 5 * time.Second
	c.Var(runconfig.Duration(&f.staleAfter), "stale-after", "a push unanswered for less than this `duration` is in flight, not a problem: it shows STALE but does not fail the exit status")
	c.epilog = `Exit status: 0 when every proxy is in sync; 3 when one is STALE (longer than
--stale-after) or in ERROR, holds a dangling reference (a route to a cluster it
does not have, ...), or a tap cannot reach its control plane; 1 when
the tap (or Prometheus) cannot be read, or has nothing asked for; 2 for bad
flags.

Inside a pod (distroless, no curl): kubectl exec POD -c adstap -- /adstap status
`
	return c
}

// statusRow is one stream of one proxy; with --prometheus, one proxy (or,
// for a tap without --metrics-node-label, one tap) of the mesh.
type statusRow struct {
	Name         string                `json:"name"`
	NodeID       string                `json:"node_id"`
	Stream       uint64                `json:"stream,omitempty"`
	Protocol     string                `json:"protocol,omitempty"`
	Peer         string                `json:"peer,omitempty"`
	ControlPlane string                `json:"control_plane"`
	Version      string                `json:"version"`
	FullSync     *float64              `json:"full_sync_seconds"`
	Types        map[string]statusCell `json:"types"` // by short type name
	// Tap is, with --prometheus, the scrape target the row comes from (its
	// instance label), and Streams how many of its streams the row sums.
	Tap     string `json:"tap,omitempty"`
	Streams int    `json:"streams,omitempty"`
	// Upstream is, with --prometheus, the tap's failing upstream.
	Upstream *upstream.State `json:"upstream,omitempty"`
	// Dangling are the references that dangle in what the proxy accepted.
	Dangling []references.DanglingReference `json:"dangling_references,omitempty"`
	// worst orders the rows: 0 for an ERROR, 1 for a STALE past the grace,
	// a dangling reference or a failing upstream, 2 otherwise.
	worst int
}

// statusCell is one type of one stream.
type statusCell struct {
	State      string   `json:"state"` // state's Display: SYNCED, STALE, ERROR, NOT SENT
	AgeSeconds *float64 `json:"age_seconds,omitempty"`
	Problem    bool     `json:"problem"`
	// Source is, for an ERROR, what the NACK rejected and the Istio objects
	// it came from (/debug/streams' last_error_source).
	Source *origin.Rejection `json:"source,omitempty"`
	// Message is an ERROR's NACK message, when known.
	Message string `json:"message,omitempty"`
	// TraceID is, with --prometheus, the trace of the latest NACK of an
	// ERROR: the trace_id of the exemplar on adstap_push_ack_seconds's
	// nack bucket. Its span holds the NACK's message and Istio objects,
	// which metrics cannot carry.
	TraceID string `json:"trace_id,omitempty"`
	// SourceWords and IstioConfig are, with --jaeger, where the NACK's
	// span says the rejected resources came from (xds.error.source) and
	// the Istio objects they record.
	SourceWords string          `json:"source_words,omitempty"`
	IstioConfig []origin.Object `json:"istio_config,omitempty"`
	state       track.State
	// nackNode is the node id (or its start) of the exemplar of TraceID.
	nackNode string
	age      string
	// sent and acked are the versions of the latest push and ACK, for the
	// problem lines (local status only).
	sent, acked string
}

// statusProblem is one line under the table: what is wrong, about which
// row, with the lines that say more. Each kind of finding adds its own.
type statusProblem struct {
	Kind    string   `json:"kind"`            // one of the problem kinds below
	Proxy   string   `json:"proxy,omitempty"` // the row's name
	Stream  uint64   `json:"stream,omitempty"`
	Type    string   `json:"type,omitempty"`
	Message string   `json:"message"`
	Detail  []string `json:"detail,omitempty"` // lines under the message
}

// The kinds of problem.
const (
	problemNACK     = "nack"     // a proxy rejected the latest push of a type
	problemStale    = "stale"    // a push unanswered for longer than --stale-after
	problemUpstream = "upstream" // the tap cannot connect to its control plane
	problemDangling = "dangling" // a reference in what the proxy accepted points at nothing
)

// statusReport is what -o json prints.
type statusReport struct {
	Now time.Time `json:"now"`
	// Source is the admin address, or the Prometheus URL, read.
	Source string `json:"source"`
	// Upstream is, for one tap, how its connections to the control plane fare.
	Upstream  *upstream.State       `json:"upstream,omitempty"`
	Proxies   []statusRow           `json:"proxies"`
	Problems  []statusProblem       `json:"problems"`
	Detectors []track.DetectorState `json:"active_detectors"`
	InSync    bool                  `json:"in_sync"`
	// mesh: the rows come from Prometheus, one per proxy across taps.
	mesh bool
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f statusFlags
	cmd := statusCommand(&f)
	if code, done := cmd.parseArgs(args, stdout, stderr); done {
		return code
	}
	if !slices.Contains([]string{"table", "wide", "json"}, f.output) {
		fmt.Fprintf(stderr, "adstap status: -o %q: want table, wide or json\n", f.output)
		return exitUsage
	}
	// ADSTAP_JAEGER alone is rollout's too: a tap's own status, which has each
	// NACK's message already, leaves it; typed without --prometheus, it is a
	// mistake to say.
	if err := cmd.needs("type", "resources", f.resources); err != nil || (f.resources && f.prometheus != "") {
		fmt.Fprintf(stderr, "adstap status: --type needs --resources, which reads one tap, not --prometheus (see adstap status --help)\n")
		return exitUsage
	}
	if f.prometheus == "" && cmd.onCommandLine("jaeger") {
		fmt.Fprintf(stderr, "adstap status: --jaeger needs --prometheus (see adstap status --help)\n")
		return exitUsage
	}
	var rep statusReport
	if f.prometheus != "" {
		var code int
		if rep, code = meshStatus(ctx, f, stderr); code != exitOK {
			return code
		}
		if f.jaeger != "" {
			if code := nackSpans(ctx, &rep, f.jaeger, stderr); code != exitOK {
				return code
			}
		}
	} else {
		client, err := newAdminClient(f.admin)
		if err != nil {
			fmt.Fprintf(stderr, "adstap status: %v\n", err)
			return exitUsage
		}
		if f.resources {
			return runStatusResources(ctx, client, f, stdout, stderr)
		}
		path := "/debug/streams"
		if f.node != "" {
			path += "?node=" + url.QueryEscape(f.node)
		}
		var streams page.Streams
		if err := client.get(ctx, path, &streams); err != nil {
			fmt.Fprintf(stderr, "adstap status: %v\n", err)
			return exitFailure
		}
		rep = buildStatus(streams, f.node, f.staleAfter)
		rep.Source = client.base
		addResourceProblems(ctx, client, f.node, &rep)
	}
	switch f.output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	default:
		printStatus(stdout, rep, f.output == "wide")
	}
	if !rep.InSync {
		return exitOutOfSync
	}
	return exitOK
}

func buildStatus(view page.Streams, node string, staleAfter time.Duration) statusReport {
	now := view.Now
	if now.IsZero() {
		now = time.Now()
	}
	rep := statusReport{Now: now, Proxies: []statusRow{}, Problems: []statusProblem{}, Detectors: []track.DetectorState{}, InSync: true}
	if view.Upstream.State != "" {
		rep.Upstream = &view.Upstream
	}
	for _, s := range view.Streams {
		row := statusRow{
			Name: proxyName(s.NodeID, s.ID), NodeID: s.NodeID, Stream: s.ID, Protocol: string(s.Protocol), Peer: s.Peer,
			ControlPlane: metrics.ControlPlaneName(s.ControlPlane), Version: proxyVersion(s), FullSync: s.FullSyncSeconds,
			Types: map[string]statusCell{}, worst: 2,
		}
		for url, ts := range s.Types {
			if url == codec.TypeSyncz {
				continue
			}
			c := statusCell{state: ts.State, sent: ts.LastSentVersion, acked: ts.LastAckedVersion}
			var at time.Time
			switch ts.State {
			case track.StateSynced:
				at = ts.LastACKAt
			case track.StateStale:
				at = ts.LastSentAt
			case track.StateNACKed:
				at, c.Message = ts.LastNACKAt, ts.LastError
				if len(ts.LastErrorSource) > 0 {
					var src origin.Rejection
					if json.Unmarshal(ts.LastErrorSource, &src) == nil {
						c.Source = &src
					}
				}
			}
			row.set(codec.ShortType(url), c, now, at, staleAfter)
		}
		for _, d := range view.Dangling {
			if d.Stream == s.ID {
				row.Dangling = append(row.Dangling, d)
			}
		}
		if len(row.Dangling) > 0 {
			rep.InSync = false
			row.worst = min(row.worst, 1)
		}
		rep.Proxies = append(rep.Proxies, row)
	}
	rep.finish()
	shown := map[uint64]bool{}
	nodes := map[string]bool{}
	for _, s := range view.Streams {
		shown[s.ID], nodes[s.NodeID] = true, true
	}
	for _, d := range view.Detectors {
		// With --node, the page has that node's streams only: so do the
		// detectors shown (a herd, about the whole tap, is not the node's).
		if d.Active && (node == "" || shown[d.StreamID] || (d.StreamID == 0 && nodes[d.Node])) {
			rep.Detectors = append(rep.Detectors, d)
		}
	}
	return rep
}

// set puts a type's cell in the row: its state in status's words, its age
// from at, and whether it is a problem.
func (r *statusRow) set(typ string, c statusCell, now, at time.Time, staleAfter time.Duration) {
	c.State = c.state.Display()
	switch c.state {
	case track.StateStale:
		c.Problem = !at.IsZero() && now.Sub(at) >= staleAfter
	case track.StateNACKed:
		c.Problem = true
	}
	if !at.IsZero() {
		secs := now.Sub(at).Seconds()
		c.AgeSeconds, c.age = &secs, age(now, at)
	}
	switch {
	case c.state == track.StateNACKed:
		r.worst = 0
	case c.Problem && r.worst > 1:
		r.worst = 1
	}
	r.Types[typ] = c
}

// finish orders the rows, problems first, and lists the problems: the
// upstream first (nothing reaches a proxy without it), then each row's in
// the order of the table.
func (rep *statusReport) finish() {
	slices.SortStableFunc(rep.Proxies, func(a, b statusRow) int {
		if a.worst != b.worst {
			return a.worst - b.worst
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := strings.Compare(a.Tap, b.Tap); c != 0 {
			return c
		}
		return int(a.Stream) - int(b.Stream)
	})
	if up := rep.Upstream; up != nil && up.State == upstream.Failing {
		p := statusProblem{Kind: problemUpstream, Message: up.Summary()}
		if up.Error != "" {
			p.Detail = []string{up.Error}
		}
		rep.Problems = append(rep.Problems, p)
	}
	saidTap := map[string]bool{}
	for _, r := range rep.Proxies {
		if up := r.Upstream; up != nil && up.State == upstream.Failing && !saidTap[r.Tap] {
			saidTap[r.Tap] = true
			rep.Problems = append(rep.Problems, statusProblem{Kind: problemUpstream, Proxy: r.Name, Message: r.Name + ": " + up.Summary()})
		}
	}
	cols := typeColumns(rep.Proxies)
	for _, r := range rep.Proxies {
		for _, t := range cols {
			if c, ok := r.Types[t]; ok && c.Problem {
				rep.Problems = append(rep.Problems, r.problem(t, c))
			}
		}
	}
	for _, r := range rep.Proxies {
		for _, d := range r.Dangling {
			// Requests that fail although every type is SYNCED.
			p := statusProblem{Kind: problemDangling, Proxy: r.Name, Stream: r.Stream,
				Message: fmt.Sprintf("%s (stream %d) dangling reference for %s: %s", r.Name, r.Stream, age(rep.Now, d.Since), d.Summary)}
			if d.IstioConfig != nil {
				p.Detail = []string{"  " + d.IstioConfig.Kubectl}
			}
			rep.Problems = append(rep.Problems, p)
		}
	}
	rep.InSync = len(rep.Problems) == 0
}

// problem says what is wrong with one type of a row.
func (r statusRow) problem(typ string, c statusCell) statusProblem {
	who := r.Name
	if r.Stream != 0 {
		who += fmt.Sprintf(" (stream %d)", r.Stream)
	}
	p := statusProblem{Proxy: r.Name, Stream: r.Stream, Type: typ}
	var b strings.Builder
	b.WriteString(who + " " + typ + ": ")
	switch c.state {
	case track.StateNACKed:
		p.Kind = problemNACK
		b.WriteString(string(track.StateNACKed))
		if c.age != "" {
			b.WriteString(" " + c.age + " ago")
		}
		if c.sent != "" || c.acked != "" {
			fmt.Fprintf(&b, "; running %s, rejected %s", orNone(c.acked), c.sent)
		}
		if c.TraceID != "" {
			b.WriteString("; trace " + c.TraceID)
		}
		if c.Message != "" {
			b.WriteString(": " + c.Message)
		}
		// The Istio object to fix, and how to look at it.
		if sum := c.Source.Summary(); sum != "" {
			p.Detail = append(p.Detail, sum)
			for _, o := range c.Source.Objects() {
				p.Detail = append(p.Detail, "  "+o.Kubectl())
			}
		} else if c.SourceWords != "" || len(c.IstioConfig) > 0 {
			p.Detail = append(p.Detail, cmp.Or(c.SourceWords, "from the Istio config below"))
			for _, o := range c.IstioConfig {
				p.Detail = append(p.Detail, "  "+o.Kubectl())
			}
		}
	case track.StateStale:
		p.Kind = problemStale
		b.WriteString("push ")
		if c.sent != "" {
			b.WriteString(c.sent + " ")
		}
		b.WriteString("unanswered for " + c.age)
		if c.sent != "" {
			b.WriteString("; running " + orNone(c.acked))
		}
	}
	p.Message = b.String()
	return p
}

// typeColumns are the types shown, in istioctl's order, then any other
// type a stream uses.
func typeColumns(rows []statusRow) []string {
	cols := []string{codec.ShortCluster, codec.ShortListener, codec.ShortEndpoint, codec.ShortRoute}
	var extra []string
	for _, r := range rows {
		for t := range r.Types {
			if !slices.Contains(cols, t) && !slices.Contains(extra, t) {
				extra = append(extra, t)
			}
		}
	}
	slices.Sort(extra)
	return append(cols, extra...)
}

func printStatus(w io.Writer, rep statusReport, wide bool) {
	switch {
	case len(rep.Proxies) == 0 && rep.Upstream != nil && rep.Upstream.State == upstream.Failing:
		fmt.Fprintln(w, "No streams: no proxy gets its configuration through this tap while its upstream fails (below).")
	case len(rep.Proxies) == 0:
		fmt.Fprintln(w, "No streams: no proxy is connected through this tap.")
	default:
		printTable(w, rep, wide)
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintln(w, "\nProblems:")
		for _, p := range rep.Problems {
			fmt.Fprintln(w, "  "+printable(p.Message))
			for _, d := range p.Detail {
				fmt.Fprintln(w, "    "+printable(d))
			}
		}
	}
	if len(rep.Detectors) > 0 {
		fmt.Fprintln(w, "\nActive detectors:")
		for _, d := range rep.Detectors {
			fmt.Fprintf(w, "  %s: %s, for %s (%d)\n", export.DetectorName(d.Detector), printable(d.Key), age(rep.Now, d.Since), d.Count)
		}
	}
}

func printTable(w io.Writer, rep statusReport, wide bool) {
	cols := typeColumns(rep.Proxies)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"NAME"}
	switch {
	case wide && rep.mesh:
		head = append(head, "TAP", "STREAMS")
	case wide:
		head = append(head, "STREAM", "PROTOCOL", "PEER")
	}
	for _, c := range cols {
		head = append(head, strings.ToUpper(c))
	}
	head = append(head, "CONTROL PLANE", "VERSION")
	if wide && !rep.mesh {
		head = append(head, "FULL SYNC")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rep.Proxies {
		line := []string{printable(r.Name)}
		switch {
		case wide && rep.mesh:
			line = append(line, printable(r.Tap), strconv.Itoa(r.Streams))
		case wide:
			line = append(line, strconv.FormatUint(r.Stream, 10), r.Protocol, printable(r.Peer))
		}
		for _, c := range cols {
			cell, ok := r.Types[c]
			switch {
			case !ok:
				line = append(line, "-")
			case cell.age != "":
				line = append(line, cell.State+" ("+cell.age+")")
			default:
				line = append(line, cell.State)
			}
		}
		controlPlane := orDash(printable(r.ControlPlane))
		if r.Upstream != nil && r.Upstream.State == upstream.Failing {
			controlPlane = "UPSTREAM FAILING"
		}
		line = append(line, controlPlane, orDash(printable(r.Version)))
		if wide && !rep.mesh {
			fs := "-"
			if r.FullSync != nil {
				fs = export.Latency(time.Duration(*r.FullSync * float64(time.Second)))
			}
			line = append(line, fs)
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	tw.Flush()
}

// proxyName is how istioctl names an Istio proxy: pod.namespace, from a node
// id type~ip~pod.namespace~domain. Other node ids are shown whole.
func proxyName(nodeID string, stream uint64) string {
	if nodeID == "" {
		return fmt.Sprintf("(stream %d, no node yet)", stream)
	}
	if parts := strings.Split(nodeID, "~"); len(parts) == 4 && parts[2] != "" {
		return parts[2]
	}
	return nodeID
}

// proxyVersion is the Istio version a sidecar reports, or else the client's
// user agent (envoy/1.36.2, gRPC Go/1.85.0).
func proxyVersion(s track.StreamState) string {
	if s.IstioVersion != "" {
		return s.IstioVersion
	}
	return s.UserAgent
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "nothing yet"
	}
	return s
}
