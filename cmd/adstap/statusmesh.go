package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/track"
)

// The mesh view reads every tap Prometheus scrapes with a fixed set of
// queries, whatever the number of taps and proxies: one for the state of
// every stream, one for the exemplars that lead each NACK to its trace,
// and, only when the first finds nothing, one to say what Prometheus does
// scrape.
var meshQuery = `{__name__=~"` + strings.Join([]string{
	metrics.MetricStreamStates, metrics.MetricLastPush, metrics.MetricLastACK,
	metrics.MetricProxyStreams, metrics.MetricUpstreamFail, metrics.MetricUpstreamTries,
}, "|") + `"}`

const (
	nackExemplarQuery = `adstap_push_ack_seconds_bucket{result="nack"}`
	// exemplarWindow is how far back the latest NACK's exemplar is looked for.
	exemplarWindow = 6 * time.Hour
	// scrapedQuery says what Prometheus scrapes when it has no adstap series.
	scrapedQuery = `count by (job) (up)`
	meshTimeout  = 30 * time.Second
)

// seriesLabels are the labels adstap puts on its series (and Prometheus on
// a histogram's buckets); every other label of a series is its scrape
// target's: job, instance, and pod and namespace from Kubernetes service
// discovery.
var seriesLabels = []string{model.MetricNameLabel, "type", "state", "node", "version", "control_plane", "reason", "result", "le"}

// meshError is a failure of the mesh view, with its exit status.
type meshError struct {
	code int
	msg  string
}

func (e *meshError) Error() string { return e.msg }

// newMeshAPI is Prometheus's HTTP API at addr; rt, when set, carries its
// requests (the tests count them).
func newMeshAPI(addr string, rt http.RoundTripper) (promv1.API, error) {
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usagef("--prometheus %q: want Prometheus's URL, http://host:port", addr)
	}
	client, err := api.NewClient(api.Config{Address: addr, RoundTripper: rt})
	if err != nil {
		return nil, usagef("--prometheus %q: %v", addr, err)
	}
	return promv1.NewAPI(client), nil
}

// meshStatus is status --prometheus: the report, or the exit status of a
// failure it has said on stderr.
func meshStatus(ctx context.Context, f statusFlags, stderr io.Writer) (statusReport, int) {
	a, err := newMeshAPI(f.prometheus, nil)
	if err != nil {
		fmt.Fprintf(stderr, "adstap status: %v\n", err)
		return statusReport{}, exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, meshTimeout)
	defer cancel()
	rep, err := readMesh(ctx, a, f.prometheus, time.Now(), f.node, f.staleAfter)
	if err != nil {
		fmt.Fprintf(stderr, "adstap status: %v\n", err)
		var me *meshError
		if errors.As(err, &me) {
			return statusReport{}, me.code
		}
		return statusReport{}, exitFailure
	}
	return rep, exitOK
}

// meshTap is what the series of one scrape target say.
type meshTap struct {
	labels   model.LabelSet // the target's own
	rows     map[string]*meshRow
	labelled bool // the tap runs with --metrics-node-label: a row per node
	reason   string
	attempts float64
}

// meshRow is one proxy of a tap (one node), or the whole tap without a node label.
type meshRow struct {
	types   map[string]*meshType
	proxies map[[2]string]float64 // streams by version and control plane
}

type meshType struct {
	states            map[string]float64
	lastPush, lastACK float64
	pushed            bool
}

// meshExemplar is the latest NACK exemplar of one row and type.
type meshExemplar struct {
	traceID string
	at      time.Time
	node    string // the exemplar's node id, or the start of it
}

// readMesh asks Prometheus for the state of every tap and builds the
// report, one row per proxy; node keeps the rows of one node id or
// pod.namespace.
func readMesh(ctx context.Context, a promv1.API, source string, now time.Time, node string, staleAfter time.Duration) (statusReport, error) {
	v, _, _, err := a.Query(ctx, meshQuery, now)
	if err != nil {
		return statusReport{}, &meshError{exitFailure, fmt.Sprintf("asking Prometheus at %s: %v", source, unwrapURLError(err))}
	}
	samples, _ := v.(model.Vector)
	if len(samples) == 0 {
		return statusReport{}, &meshError{exitFailure, noTaps(ctx, a, source, now)}
	}
	taps := map[string]*meshTap{}
	for _, s := range samples {
		id, target := tapOf(s.Metric)
		t := taps[id]
		if t == nil {
			t = &meshTap{labels: target, rows: map[string]*meshRow{}}
			taps[id] = t
		}
		name, val := string(s.Metric[model.MetricNameLabel]), float64(s.Value)
		switch name {
		case metrics.MetricUpstreamFail:
			if val == 1 {
				t.reason = string(s.Metric["reason"])
			}
			continue
		case metrics.MetricUpstreamTries:
			t.attempts = val
			continue
		}
		nodeValue, labelled := s.Metric["node"]
		t.labelled = t.labelled || labelled
		r := t.rows[string(nodeValue)]
		if r == nil {
			r = &meshRow{types: map[string]*meshType{}, proxies: map[[2]string]float64{}}
			t.rows[string(nodeValue)] = r
		}
		if name == metrics.MetricProxyStreams {
			r.proxies[[2]string{string(s.Metric["version"]), string(s.Metric["control_plane"])}] += val
			continue
		}
		typ := string(s.Metric["type"])
		mt := r.types[typ]
		if mt == nil {
			mt = &meshType{states: map[string]float64{}}
			r.types[typ] = mt
		}
		switch name {
		case metrics.MetricStreamStates:
			mt.states[string(s.Metric["state"])] += val
		case metrics.MetricLastPush:
			mt.pushed, mt.lastPush = true, max(mt.lastPush, val)
		case metrics.MetricLastACK:
			mt.lastACK = max(mt.lastACK, val)
		}
	}
	exemplars := nackExemplars(ctx, a, now)

	rep := statusReport{Now: now, Source: source, Proxies: []statusRow{}, Problems: []statusProblem{}, Detectors: []track.DetectorState{}, InSync: true, mesh: true}
	for id, t := range taps {
		tapName := targetName(t.labels)
		var up *upstream.State
		if t.reason != "" {
			up = &upstream.State{State: upstream.Failing, Reason: t.reason, Words: upstream.ReasonWords(t.reason), FailedAttempts: int(t.attempts)}
		}
		var rows []statusRow
		for nodeID, r := range t.rows {
			row := statusRow{Name: tapName, NodeID: nodeID, Tap: string(t.labels[model.InstanceLabel]), Types: map[string]statusCell{}, Upstream: up, worst: 2}
			if t.labelled {
				switch nodeID {
				case "":
					row.Name = tapName + " (no node yet)"
				case metrics.OverflowNode:
					row.Name = tapName + " (nodes past --metrics-max-nodes)"
				default:
					row.Name = proxyName(nodeID, 0)
				}
			}
			var most float64
			for k, n := range r.proxies {
				row.Streams += int(n)
				if n > most || n == most && (k[0] < row.Version || k[0] == row.Version && k[1] < row.ControlPlane) {
					most, row.Version, row.ControlPlane = n, k[0], k[1]
				}
			}
			if row.Streams == 0 && len(r.types) == 0 {
				continue
			}
			for typ, mt := range r.types {
				state := worstState(mt.states)
				if state == "" {
					continue
				}
				c := statusCell{state: state}
				var at time.Time
				switch state {
				case track.StateSynced:
					at = unixTime(mt.lastACK)
				case track.StateStale:
					at = unixTime(mt.lastPush)
				case track.StateNACKed:
					if ex, ok := exemplars[exemplarKey{id, nodeID, typ}]; ok {
						c.TraceID, c.nackNode, at = ex.traceID, ex.node, ex.at
					}
				}
				row.set(typ, c, now, at, staleAfter)
			}
			rows = append(rows, row)
		}
		if len(rows) == 0 {
			// A tap no proxy is connected to: it is there, and its upstream
			// may be why.
			rows = append(rows, statusRow{Name: tapName, Tap: string(t.labels[model.InstanceLabel]), Types: map[string]statusCell{}, Upstream: up, worst: 2})
		}
		for i := range rows {
			if up != nil && rows[i].worst > 1 {
				rows[i].worst = 1
			}
		}
		rep.Proxies = append(rep.Proxies, rows...)
	}
	if node != "" {
		all := rep.Proxies
		rep.Proxies = slices.DeleteFunc(slices.Clone(all), func(r statusRow) bool {
			return r.NodeID != node && r.Name != node && r.Name != proxyName(node, 0)
		})
		if len(rep.Proxies) == 0 {
			return statusReport{}, &meshError{exitFailure, fmt.Sprintf("no proxy %q among the %d that Prometheus at %s shows (%s)", node, len(all), source, someNames(all))}
		}
	}
	rep.finish()
	return rep, nil
}

// worstState is the state a row shows for a type its streams are in (by
// the state label's value): the worst of them.
func worstState(states map[string]float64) track.State {
	for _, s := range []track.State{track.StateNACKed, track.StateStale, track.StateNotSent, track.StateSynced} {
		if states[string(s)] > 0 {
			return s
		}
	}
	return ""
}

func unixTime(secs float64) time.Time {
	if secs <= 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(secs*1e9))
}

// tapOf splits a series' labels into its scrape target's, and that
// target's identity.
func tapOf(m model.Metric) (string, model.LabelSet) {
	target := model.LabelSet{}
	for k, v := range m {
		if !slices.Contains(seriesLabels, string(k)) {
			target[k] = v
		}
	}
	return target.String(), target
}

// targetName names a scrape target as status names a proxy: pod.namespace,
// from Kubernetes service discovery's labels (pod and namespace, or the
// older kubernetes_pod_name and kubernetes_namespace), else its instance.
func targetName(l model.LabelSet) string {
	pod := cmp.Or(l["pod"], l["kubernetes_pod_name"], l["pod_name"])
	ns := cmp.Or(l["namespace"], l["kubernetes_namespace"])
	switch {
	case pod != "" && ns != "":
		return string(pod + "." + ns)
	case pod != "":
		return string(pod)
	}
	return string(cmp.Or(l[model.InstanceLabel], l[model.JobLabel]))
}

type exemplarKey struct{ tap, node, typ string }

// nackExemplars finds, for each tap, node and type, the trace of its latest
// NACK. Exemplars need Prometheus's exemplar storage
// (--enable-feature=exemplar-storage); without it there are none, and the
// rows have no trace id.
func nackExemplars(ctx context.Context, a promv1.API, now time.Time) map[exemplarKey]meshExemplar {
	out := map[exemplarKey]meshExemplar{}
	res, err := a.QueryExemplars(ctx, nackExemplarQuery, now.Add(-exemplarWindow), now)
	if err != nil {
		return out
	}
	for _, r := range res {
		id, _ := tapOf(model.Metric(r.SeriesLabels))
		k := exemplarKey{id, string(r.SeriesLabels["node"]), string(r.SeriesLabels["type"])}
		for _, e := range r.Exemplars {
			trace := string(e.Labels["trace_id"])
			at := e.Timestamp.Time()
			if trace != "" && at.After(out[k].at) {
				out[k] = meshExemplar{trace, at, string(e.Labels["node_id"])}
			}
		}
	}
	return out
}

// noTaps says that Prometheus has no series of a tap, and what it does scrape.
func noTaps(ctx context.Context, a promv1.API, source string, now time.Time) string {
	msg := fmt.Sprintf("Prometheus at %s has no %s series: is it scraping the taps (adstap run --metrics-listen, or Istio's metrics merging)?", source, metrics.MetricStreamStates)
	v, _, _, err := a.Query(ctx, scrapedQuery, now)
	jobs, _ := v.(model.Vector)
	if err != nil || len(jobs) == 0 {
		return msg + " It scrapes nothing."
	}
	var names []string
	for _, s := range jobs {
		names = append(names, fmt.Sprintf("%s (%v targets)", s.Metric[model.JobLabel], s.Value))
	}
	slices.Sort(names)
	return msg + " It scrapes the jobs " + strings.Join(names, ", ") + "."
}

// someNames lists a few rows' names, for an error that says what exists.
func someNames(rows []statusRow) string {
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return strings.Join(names, ", ")
}
