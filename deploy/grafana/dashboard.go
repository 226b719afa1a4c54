package grafana

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/adstap/adstap/track"
)

// The dashboard is written from this table: rows of panels, each a few
// PromQL queries over adstap's metrics (docs/metrics.md). Queries select
// the tap with $instance and rate over $__rate_interval, and read the
// Prometheus data source the importer picks ($datasource): the file names
// no data source by its UID.

// query is one target of a panel.
type query struct {
	expr, legend string
	// exemplar asks Grafana for the exemplars of a histogram: adstap puts
	// the proxy's node id and, with tracing on, the push's trace id on
	// them, and the data source's exemplar link opens the trace in Jaeger.
	exemplar bool
}

type panelSpec struct {
	title, description string
	unit               string
	stat               bool // a single number rather than a time series
	width              int  // in Grafana's 24-column grid
	queries            []query
}

type rowSpec struct {
	title  string
	panels []panelSpec
}

// sel is the selector every query puts on adstap's series.
const sel = `instance=~"$instance"`

func rate(metric, by string) string {
	return "sum by (" + by + ") (rate(" + metric + "{" + sel + "}[$__rate_interval]))"
}

func quantile(q, metric, by, extra string) string {
	matchers := sel
	if extra != "" {
		matchers += ", " + extra
	}
	return "histogram_quantile(" + q + ", sum by (le, " + by + ") (rate(" + metric + "_bucket{" + matchers + "}[$__rate_interval])))"
}

var rows = []rowSpec{
	{"Mesh", []panelSpec{
		{title: "Proxies by state, per type", unit: "short", width: 8,
			description: "Streams of every selected tap (a sidecar tap has one proxy) in each state of istioctl proxy-status: " + string(track.StateSynced) + ", " +
				string(track.StateStale) + " (a push unanswered), " + string(track.StateNACKed) + " (the latest push rejected), " + string(track.StateNotSent) + ". adstap status --prometheus lists them, problems first.",
			queries: []query{{expr: "sum by (type, state) (adstap_stream_states{" + sel + "})", legend: "{{type}} {{state}}"}}},
		{title: "Proxies in " + track.StateNACKed.Display() + " or " + track.StateStale.Display() + " now", unit: "short", stat: true, width: 4,
			queries: []query{{expr: "sum(adstap_stream_states{" + sel + `, state=~"` + string(track.StateNACKed) + "|" + string(track.StateStale) + `"})`, legend: "not in sync"}}},
		{title: "Time to ACK across the mesh, p50 and p99", unit: "s", width: 6,
			description: "Push to ACK over every selected tap: convergence as the proxies apply it, which istiod's pilot_proxy_convergence_time (it stops at send) cannot show. Exemplars open the push round's trace.",
			queries: []query{
				{expr: quantile("0.99", "adstap_push_ack_seconds", "result", `result="ack"`), legend: "p99", exemplar: true},
				{expr: quantile("0.5", "adstap_push_ack_seconds", "result", `result="ack"`), legend: "p50"},
			}},
		{title: "Top NACKing proxies", unit: "short", width: 6,
			description: "NACKs over the dashboard's range, by tap (pod and namespace when Prometheus's Kubernetes discovery adds them).",
			queries:     []query{{expr: "topk(10, sum by (namespace, pod, instance) (increase(adstap_nacks_total{" + sel + "}[$__range])))", legend: "{{pod}}.{{namespace}} {{instance}}"}}},
		{title: "Longest since an ACK, by tap and type", unit: "s", width: 12,
			description: "Seconds since each tap's proxy last ACKed a push of the type: one far behind its peers is stuck (AdstapProxyNotACKing).",
			queries:     []query{{expr: "topk(10, time() - max by (instance, type) (adstap_last_ack_timestamp_seconds{" + sel + "}))", legend: "{{instance}} {{type}}"}}},
		{title: "Taps whose upstream fails, by reason", unit: "short", width: 12,
			description: "Taps whose latest connection to the control plane failed: an expired or untrusted certificate, a wrong name, DNS, refused, a timeout. Their proxies get no configuration (AdstapUpstreamFailing).",
			queries:     []query{{expr: "sum by (reason) (adstap_upstream_failing{" + sel + "})", legend: "{{reason}}"}}},
	}},
	{"Pushes and ACKs", []panelSpec{
		{title: "Pushes per second, by type", unit: "ops", width: 8,
			description: "Responses the control plane sent to proxies through the tap.",
			queries:     []query{{expr: rate("adstap_pushes_total", "type"), legend: "{{type}}"}}},
		{title: "Time to ACK, p50 and p99, by type", unit: "s", width: 8,
			description: "From a push crossing the tap to the proxy's ACK. Exemplars (dots) name the proxy and, with tracing on, open the push's trace in Jaeger.",
			queries: []query{
				{expr: quantile("0.99", "adstap_push_ack_seconds", "type", `result="ack"`), legend: "p99 {{type}}", exemplar: true},
				{expr: quantile("0.5", "adstap_push_ack_seconds", "type", `result="ack"`), legend: "p50 {{type}}"},
			}},
		{title: "Push size p99, by type", unit: "bytes", width: 8,
			description: "istiod's own buckets stop at 40 MB; a push near the proxies' gRPC limit is rejected whole.",
			queries:     []query{{expr: quantile("0.99", "adstap_push_bytes", "type", ""), legend: "{{type}}"}}},
		{title: "Pushes waiting for an answer, and timeouts", unit: "short", width: 12,
			description: "A push unanswered for --push-timeout leaves its proxy STALE (adstap status).",
			queries: []query{
				{expr: "sum by (type) (adstap_pushes_pending{" + sel + "})", legend: "waiting {{type}}"},
				{expr: rate("adstap_push_timeouts_total", "type"), legend: "timeouts/s {{type}}"},
			}},
		{title: "Stale nonces and redundant pushes per second", unit: "ops", width: 12,
			description: "Answers to pushes already superseded, and pushes that changed nothing the proxy had: wasted work for both sides.",
			queries: []query{
				{expr: rate("adstap_stale_nonces_total", "type"), legend: "stale {{type}}"},
				{expr: rate("adstap_redundant_pushes_total", "type"), legend: "redundant {{type}}"},
			}},
	}},
	{"NACKs", []panelSpec{
		{title: "NACKs per second, by type", unit: "ops", width: 8,
			description: "Pushes a proxy rejected: it keeps running its previous configuration. adstap status and the live page show each NACK's message.",
			queries:     []query{{expr: rate("adstap_nacks_total", "type"), legend: "{{type}}"}}},
		{title: "Share of pushes rejected", unit: "percentunit", width: 8,
			queries: []query{{expr: "sum(rate(adstap_nacks_total{" + sel + "}[$__rate_interval])) / sum(rate(adstap_pushes_total{" + sel + "}[$__rate_interval]))", legend: "rejected"}}},
		{title: "NACK storms and loops now", unit: "short", width: 8,
			description: "Storm: many NACKs of one stream and type in a short window. Loop: the same rejected content pushed again and again (the control plane does not learn).",
			queries: []query{
				{expr: "sum by (type) (adstap_nack_storm_active{" + sel + "})", legend: "storm {{type}}"},
				{expr: "sum by (type) (adstap_nack_loop_active{" + sel + "})", legend: "loop {{type}}"},
			}},
		{title: "Time to NACK, p99", unit: "s", width: 12,
			queries: []query{{expr: quantile("0.99", "adstap_push_ack_seconds", "type", `result="nack"`), legend: "{{type}}", exemplar: true}}},
		{title: "Storms and loops started", unit: "short", width: 12,
			queries: []query{
				{expr: "sum by (type) (increase(adstap_nack_storms_total{" + sel + "}[$__rate_interval]))", legend: "storms {{type}}"},
				{expr: "sum by (type) (increase(adstap_nack_loops_total{" + sel + "}[$__rate_interval]))", legend: "loops {{type}}"},
			}},
	}},
	{"Full syncs", []panelSpec{
		{title: "Full pushes per second, initial and repeated", unit: "ops", width: 8,
			description: "A push carrying the whole subscribed set of its type: expected once per stream (initial); repeated ones cost the control plane a full computation each.",
			queries:     []query{{expr: rate("adstap_full_syncs_total", "reason, type"), legend: "{{reason}} {{type}}"}}},
		{title: "Repeated full sync alarm", unit: "short", stat: true, width: 4,
			description: "Nodes resent their whole configuration more than --full-sync-limit times within --full-sync-window, now.",
			queries:     []query{{expr: "sum(adstap_repeated_full_sync_active{" + sel + "})", legend: "nodes"}}},
		{title: "Alarms raised", unit: "short", stat: true, width: 4,
			queries: []query{{expr: "sum(increase(adstap_repeated_full_sync_alarms_total{" + sel + "}[$__range]))", legend: "alarms"}}},
		{title: "Time to full sync, p50 and p99", unit: "s", width: 8,
			description: "From a stream opening to every type it asked for being ACKed; over 5 s is worth a look. Exemplars name the proxy.",
			queries: []query{
				{expr: "histogram_quantile(0.99, sum by (le) (rate(adstap_full_sync_seconds_bucket{" + sel + "}[$__rate_interval])))", legend: "p99", exemplar: true},
				{expr: "histogram_quantile(0.5, sum by (le) (rate(adstap_full_sync_seconds_bucket{" + sel + "}[$__rate_interval])))", legend: "p50"},
			}},
	}},
	{"Streams and connections", []panelSpec{
		{title: "Streams relayed now, by protocol", unit: "short", width: 6,
			queries: []query{{expr: "sum by (protocol) (adstap_streams_active{" + sel + "})", legend: "{{protocol}}"}}},
		{title: "Streams opened per second, and reconnect herds", unit: "ops", width: 6,
			description: "A reconnect herd: --herd-threshold streams or more within --herd-window, as after an istiod restart.",
			queries: []query{
				{expr: rate("adstap_streams_opened_total", "protocol"), legend: "opened {{protocol}}"},
				{expr: "max(adstap_reconnect_herd_active{" + sel + "})", legend: "herd on"},
				{expr: "sum(increase(adstap_reconnect_herds_total{" + sel + "}[$__rate_interval]))", legend: "herds started"},
			}},
		{title: "Upstream connect phases, p99", unit: "s", width: 6,
			description: "dns, tcp and tls of each upstream connection, and first_response: stream open to the control plane's first push.",
			queries:     []query{{expr: quantile("0.99", "adstap_upstream_connect_seconds", "phase", ""), legend: "{{phase}}"}}},
		{title: "Upstream connect failures per second", unit: "ops", width: 6,
			queries: []query{{expr: rate("adstap_upstream_connect_failures_total", "reason"), legend: "{{reason}}"}}},
	}},
	{"Relay", []panelSpec{
		{title: "Bytes relayed per second", unit: "Bps", width: 8,
			description: "Every byte both ways, counted by the relay itself whatever the observers keep up with.",
			queries:     []query{{expr: rate("adstap_bytes_total", "direction, protocol"), legend: "{{direction}} {{protocol}}"}}},
		{title: "Messages relayed per second", unit: "ops", width: 8,
			queries: []query{{expr: rate("adstap_messages_total", "direction, protocol"), legend: "{{direction}} {{protocol}}"}}},
		{title: "Undecodable frames per second", unit: "ops", width: 8,
			description: "Frames whose envelope could not be decoded: relayed unchanged, not tracked.",
			queries:     []query{{expr: rate("adstap_decode_errors_total", "type"), legend: "{{type}}"}}},
		{title: "adstap's memory and CPU", unit: "bytes", width: 12,
			queries: []query{
				{expr: "sum by (instance) (process_resident_memory_bytes{" + sel + `})`, legend: "resident {{instance}}"},
				{expr: "sum by (instance) (go_memstats_heap_inuse_bytes{" + sel + `})`, legend: "heap {{instance}}"},
			}},
		{title: "adstap's CPU", unit: "percentunit", width: 12,
			queries: []query{{expr: "sum by (instance) (rate(process_cpu_seconds_total{" + sel + `}[$__rate_interval]))`, legend: "{{instance}}"}}},
	}},
}

// The JSON model of a Grafana dashboard, as much of it as this one uses.
type (
	dashboardJSON struct {
		Title         string          `json:"title"`
		Description   string          `json:"description"`
		Tags          []string        `json:"tags"`
		Editable      bool            `json:"editable"`
		GraphTooltip  int             `json:"graphTooltip"`
		SchemaVersion int             `json:"schemaVersion"`
		Refresh       string          `json:"refresh"`
		Time          timeRange       `json:"time"`
		Templating    templating      `json:"templating"`
		Links         []dashboardLink `json:"links"`
		Panels        []panelJSON     `json:"panels"`
	}
	timeRange  struct{ From, To string }
	templating struct {
		List []variable `json:"list"`
	}
	variable struct {
		Name       string       `json:"name"`
		Label      string       `json:"label"`
		Type       string       `json:"type"`
		Query      string       `json:"query"`
		Datasource *datasource  `json:"datasource,omitempty"`
		Refresh    int          `json:"refresh,omitempty"`
		IncludeAll bool         `json:"includeAll"`
		Multi      bool         `json:"multi"`
		AllValue   string       `json:"allValue,omitempty"`
		Current    *currentPick `json:"current,omitempty"`
	}
	currentPick struct {
		Text  string `json:"text"`
		Value string `json:"value"`
	}
	datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	dashboardLink struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		URL     string `json:"url"`
		Tooltip string `json:"tooltip"`
	}
	panelJSON struct {
		ID          int          `json:"id"`
		Type        string       `json:"type"`
		Title       string       `json:"title"`
		Description string       `json:"description,omitempty"`
		GridPos     gridPos      `json:"gridPos"`
		Datasource  *datasource  `json:"datasource,omitempty"`
		Targets     []targetJSON `json:"targets,omitempty"`
		FieldConfig *fieldConfig `json:"fieldConfig,omitempty"`
		Options     any          `json:"options,omitempty"`
		Collapsed   *bool        `json:"collapsed,omitempty"`
		Panels      []panelJSON  `json:"panels,omitempty"`
	}
	gridPos    struct{ H, W, X, Y int }
	targetJSON struct {
		RefID        string      `json:"refId"`
		Datasource   *datasource `json:"datasource"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Exemplar     bool        `json:"exemplar"`
		Range        bool        `json:"range"`
		Instant      bool        `json:"instant"`
	}
	fieldConfig struct {
		Defaults  fieldDefaults `json:"defaults"`
		Overrides []any         `json:"overrides"`
	}
	fieldDefaults struct {
		Unit string `json:"unit"`
	}
)

func (g gridPos) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]int{"h": g.H, "w": g.W, "x": g.X, "y": g.Y})
}

func (t timeRange) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"from": t.From, "to": t.To})
}

// prometheus is the data source every query reads: the dashboard's
// variable, never a UID of one Grafana's.
var prometheus = &datasource{Type: "prometheus", UID: "${datasource}"}

// build returns the dashboard's JSON, indented, as written to
// deploy/grafana/dashboard.json.
func build() []byte {
	d := dashboardJSON{
		Title:         "adstap: xDS pushes, ACKs and NACKs",
		Description:   "What adstap sees between proxies and their control plane: pushes and ACK latency, NACKs with storms and loops, full syncs, streams and herds, connect phases, relayed bytes. From docs/metrics.md; built by deploy/grafana.",
		Tags:          []string{"adstap", "xds", "istio", "envoy"},
		Editable:      true,
		GraphTooltip:  1,
		SchemaVersion: 39,
		Refresh:       "30s",
		Time:          timeRange{From: "now-1h", To: "now"},
		Templating: templating{List: []variable{
			{Name: "datasource", Label: "Prometheus", Type: "datasource", Query: "prometheus"},
			{Name: "job", Label: "job", Type: "query", Datasource: prometheus, Refresh: 2,
				Query: "label_values(adstap_build_info, job)", IncludeAll: true, Multi: true, AllValue: ".*",
				Current: &currentPick{Text: "All", Value: "$__all"}},
			{Name: "instance", Label: "tap", Type: "query", Datasource: prometheus, Refresh: 2,
				Query: `label_values(adstap_build_info{job=~"$job"}, instance)`, IncludeAll: true, Multi: true, AllValue: ".*",
				Current: &currentPick{Text: "All", Value: "$__all"}},
		}},
		Links: []dashboardLink{{
			Title: "Metrics reference", Type: "link", URL: "https://github.com/adstap/adstap/blob/main/docs/metrics.md",
			Tooltip: "what each metric means",
		}},
	}
	id, y := 1, 0
	for _, r := range rows {
		open := false
		d.Panels = append(d.Panels, panelJSON{ID: id, Type: "row", Title: r.title, GridPos: gridPos{H: 1, W: 24, X: 0, Y: y}, Collapsed: &open})
		id++
		y++
		x, rowH := 0, 8
		for _, p := range r.panels {
			if x+p.width > 24 {
				x, y = 0, y+rowH
			}
			pj := panelJSON{
				ID: id, Type: "timeseries", Title: p.title, Description: p.description,
				GridPos: gridPos{H: rowH, W: p.width, X: x, Y: y}, Datasource: prometheus,
				FieldConfig: &fieldConfig{Defaults: fieldDefaults{Unit: p.unit}, Overrides: []any{}},
				Options: map[string]any{
					"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true},
					"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
				},
			}
			if p.stat {
				pj.Type = "stat"
				pj.Options = map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}, "colorMode": "value", "graphMode": "area"}
			}
			for i, q := range p.queries {
				pj.Targets = append(pj.Targets, targetJSON{
					RefID: string(rune('A' + i)), Datasource: prometheus, Expr: q.expr, LegendFormat: q.legend,
					Exemplar: q.exemplar, Range: true,
				})
			}
			d.Panels = append(d.Panels, pj)
			id++
			x += p.width
		}
		y += rowH
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		panic(err) // only our own types: cannot fail
	}
	return b.Bytes()
}

// queriesByPanel returns every query of the dashboard, each with its panel's title.
func queriesByPanel() map[string][]string {
	out := map[string][]string{}
	for _, r := range rows {
		for _, p := range r.panels {
			for _, q := range p.queries {
				out[p.title] = append(out[p.title], q.expr)
			}
		}
	}
	return out
}

// grafanaVars stands in for the variables Grafana expands before a query
// reaches Prometheus, so the query can be parsed as Prometheus will see it.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h",
	"$instance", ".*", "$job", ".*",
)

// expand replaces Grafana's variables in a query as Grafana would.
func expand(expr string) string { return grafanaVars.Replace(expr) }
