package main

import (
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
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// exitOutOfSync is `adstap status`'s answer when a proxy is STALE or in
// ERROR: distinct from a failure to ask (1) and from bad flags (2), so a
// probe or a script can tell "the mesh is unwell" from "adstap is".
const exitOutOfSync = 3

type statusFlags struct {
	admin      string
	output     string
	staleAfter time.Duration
	node       string
}

func statusCommand(f *statusFlags) *command {
	c := newCommand("status",
		"adstap status shows, from a running tap, every proxy it relays as istioctl proxy-status does: the control-plane replica serving it, its version, and per type SYNCED, STALE (a push unanswered), ERROR (the proxy NACKed the latest push) or NOT SENT, with how long ago. Problems come first, then each NACK's message, the dangling references (requests that fail although every type is SYNCED: a route to a cluster the proxy does not have, ...) and the detectors that are active.",
		"adstap status [flags]")
	c.group("Where")
	adminFlag(c, &f.admin)
	c.String(&f.node, "node", "", "only the proxy with this node `id`")
	c.group("Output")
	c.String(&f.output, "o", "table", "`format`: table, wide (adds stream, protocol, peer, time to full sync) or json")
	f.staleAfter = 5 * time.Second
	c.Var(durationValue{&f.staleAfter}, "stale-after", "a push unanswered for less than this `duration` is in flight, not a problem: it shows STALE but does not fail the exit status")
	c.epilog = `Exit status: 0 when every proxy is in sync; 3 when one is STALE (longer than
--stale-after) or in ERROR, or holds a dangling reference (a route to a cluster it
does not have, ...); 1 when the tap cannot be read; 2 for bad flags.

Inside a pod (distroless, no curl): kubectl exec POD -c adstap -- /adstap status
`
	return c
}

// statusRow is one stream of one proxy.
type statusRow struct {
	Name         string                `json:"name"`
	NodeID       string                `json:"node_id"`
	Stream       uint64                `json:"stream"`
	Protocol     string                `json:"protocol"`
	Peer         string                `json:"peer"`
	ControlPlane string                `json:"control_plane"`
	Version      string                `json:"version"`
	FullSync     *float64              `json:"full_sync_seconds"`
	Types        map[string]statusCell `json:"types"` // by short type name
	// Dangling are the references that dangle in what the proxy accepted.
	Dangling []export.DanglingReference `json:"dangling_references,omitempty"`
	// worst orders the rows: 0 for an ERROR, 1 for a STALE past the grace, 2 otherwise.
	worst int
}

// statusCell is one type of one stream.
type statusCell struct {
	State      string   `json:"state"` // SYNCED, STALE, ERROR, NOT SENT
	AgeSeconds *float64 `json:"age_seconds,omitempty"`
	Problem    bool     `json:"problem"`
	// Source is, for an ERROR, what the NACK rejected and the Istio objects
	// it came from (/debug/streams' last_error_source).
	Source *origin.Rejection `json:"source,omitempty"`
	age    string
	ts     *track.TypeState
}

// statusReport is what -o json prints.
type statusReport struct {
	Now       time.Time             `json:"now"`
	Proxies   []statusRow           `json:"proxies"`
	Detectors []track.DetectorState `json:"active_detectors"`
	InSync    bool                  `json:"in_sync"`
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
	client, err := newAdminClient(f.admin)
	if err != nil {
		fmt.Fprintf(stderr, "adstap status: %v\n", err)
		return exitUsage
	}
	path := "/debug/streams"
	if f.node != "" {
		path += "?node=" + url.QueryEscape(f.node)
	}
	var page export.StreamsPage
	if err := client.get(ctx, path, &page); err != nil {
		fmt.Fprintf(stderr, "adstap status: %v\n", err)
		return exitFailure
	}
	rep := buildStatus(page, f.node, f.staleAfter)
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

func buildStatus(page export.StreamsPage, node string, staleAfter time.Duration) statusReport {
	now := page.Now
	if now.IsZero() {
		now = time.Now()
	}
	rep := statusReport{Now: now, Proxies: []statusRow{}, Detectors: []track.DetectorState{}, InSync: true}
	for _, s := range page.Streams {
		row := statusRow{
			Name: proxyName(s.NodeID, s.ID), NodeID: s.NodeID, Stream: s.ID, Protocol: string(s.Protocol), Peer: s.Peer,
			ControlPlane: controlPlaneName(s.ControlPlane), Version: proxyVersion(s), FullSync: s.FullSyncSeconds,
			Types: map[string]statusCell{}, worst: 2,
		}
		for url, ts := range s.Types {
			short := codec.ShortType(url)
			if url == codec.TypeSyncz {
				continue
			}
			c := statusCell{State: ts.State, ts: ts}
			var at time.Time
			switch ts.State {
			case "SYNCED":
				at = ts.LastACKAt
			case "STALE":
				at = ts.LastSentAt
				c.Problem = now.Sub(at) >= staleAfter
			case "NACKED":
				c.State, at, c.Problem = "ERROR", ts.LastNACKAt, true
				if len(ts.LastErrorSource) > 0 {
					var src origin.Rejection
					if json.Unmarshal(ts.LastErrorSource, &src) == nil {
						c.Source = &src
					}
				}
			case "NOT_SENT":
				c.State = "NOT SENT"
			}
			if !at.IsZero() {
				secs := now.Sub(at).Seconds()
				c.AgeSeconds, c.age = &secs, age(now, at)
			}
			switch {
			case c.State == "ERROR":
				row.worst = 0
			case c.Problem && row.worst > 1:
				row.worst = 1
			}
			if c.Problem {
				rep.InSync = false
			}
			row.Types[short] = c
		}
		for _, d := range page.Dangling {
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
	slices.SortStableFunc(rep.Proxies, func(a, b statusRow) int {
		if a.worst != b.worst {
			return a.worst - b.worst
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return int(a.Stream) - int(b.Stream)
	})
	shown := map[uint64]bool{}
	nodes := map[string]bool{}
	for _, s := range page.Streams {
		shown[s.ID], nodes[s.NodeID] = true, true
	}
	for _, d := range page.Detectors {
		// With --node, the page has that node's streams only: so do the
		// detectors shown (a herd, about the whole tap, is not the node's).
		if d.Active && (node == "" || shown[d.StreamID] || (d.StreamID == 0 && nodes[d.Node])) {
			rep.Detectors = append(rep.Detectors, d)
		}
	}
	return rep
}

// typeColumns are the types shown, in istioctl's order, then any other
// type a stream uses.
func typeColumns(rows []statusRow) []string {
	cols := []string{"cds", "lds", "eds", "rds"}
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
	if len(rep.Proxies) == 0 {
		fmt.Fprintln(w, "No streams: no proxy is connected through this tap.")
		return
	}
	cols := typeColumns(rep.Proxies)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"NAME"}
	if wide {
		head = append(head, "STREAM", "PROTOCOL", "PEER")
	}
	for _, c := range cols {
		head = append(head, strings.ToUpper(c))
	}
	head = append(head, "CONTROL PLANE", "VERSION")
	if wide {
		head = append(head, "FULL SYNC")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rep.Proxies {
		line := []string{printable(r.Name)}
		if wide {
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
		line = append(line, orDash(printable(r.ControlPlane)), orDash(printable(r.Version)))
		if wide {
			fs := "-"
			if r.FullSync != nil {
				fs = export.Latency(time.Duration(*r.FullSync * float64(time.Second)))
			}
			line = append(line, fs)
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	tw.Flush()

	var problems []string
	for _, r := range rep.Proxies {
		for _, c := range cols {
			cell, ok := r.Types[c]
			if !ok || !cell.Problem {
				continue
			}
			ts := cell.ts
			switch cell.State {
			case "ERROR":
				problems = append(problems, fmt.Sprintf("%s (stream %d) %s: NACKED %s ago; running %s, rejected %s: %s",
					printable(r.Name), r.Stream, c, cell.age, orNone(printable(ts.LastAckedVersion)), printable(ts.LastSentVersion), printable(ts.LastError)))
				// The Istio object to fix, and how to look at it.
				if s := cell.Source.Summary(); s != "" {
					problems = append(problems, "  "+printable(s))
					for _, o := range cell.Source.Objects() {
						problems = append(problems, "    "+printable(o.Kubectl()))
					}
				}
			case "STALE":
				problems = append(problems, fmt.Sprintf("%s (stream %d) %s: push %s unanswered for %s; running %s",
					printable(r.Name), r.Stream, c, printable(ts.LastSentVersion), cell.age, orNone(printable(ts.LastAckedVersion))))
			}
		}
	}
	for _, r := range rep.Proxies {
		for _, d := range r.Dangling {
			// Requests that fail although every type is SYNCED.
			problems = append(problems, fmt.Sprintf("%s (stream %d) dangling reference for %s: %s",
				printable(r.Name), r.Stream, age(rep.Now, d.Since), printable(d.Summary)))
			if d.IstioConfig != nil {
				problems = append(problems, "    "+printable(d.IstioConfig.Kubectl))
			}
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(w, "\nProblems:")
		for _, p := range problems {
			fmt.Fprintln(w, "  "+p)
		}
	}
	if len(rep.Detectors) > 0 {
		fmt.Fprintln(w, "\nActive detectors:")
		for _, d := range rep.Detectors {
			fmt.Fprintf(w, "  %s: %s, for %s (%d)\n", export.DetectorName(d.Detector), printable(d.Key), age(rep.Now, d.Since), d.Count)
		}
	}
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

// controlPlaneName shortens istiod's identifier, a JSON object naming its
// pod ({"Component":"istiod","ID":"istiod-5d7c…",...}), to the pod.
func controlPlaneName(id string) string {
	var istiod struct{ ID string }
	if strings.HasPrefix(id, "{") && json.Unmarshal([]byte(id), &istiod) == nil && istiod.ID != "" {
		return istiod.ID
	}
	return id
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
