// Package metrics is the Prometheus output: the tracker's events, the relay's counters and the streams' states as metrics, read at scrape time where they can be.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/track"
)

// Config shapes the Prometheus metrics.
type Config struct {
	// OutputConfig.Logger is told when nodes pass MaxNodes; QueueBytes is
	// unused: the metrics have no queue.
	export.OutputConfig
	// Relay is what the relay counts itself (tap.Server.Stats), read at
	// scrape time; nil leaves its metrics out.
	Relay RelayStats
	// NodeLabel adds a node label (the node id) to the per-type metrics. Off
	// by default: an unbounded label once took a Prometheus down (istio#14642).
	// It is for a debugging tap in front of a handful of proxies.
	NodeLabel bool
	// MaxNodes caps the distinct node label values; later nodes are "other".
	MaxNodes int
	// Version is reported in adstap_build_info.
	Version string
	// TraceID, when set, names the trace of a push, for the exemplars that
	// lead from a latency bucket to the push's trace.
	TraceID func(*track.Push) string
	// SpansDropped, when set, counts the spans that never reached the
	// collector, by why (Tracing.Drops).
	SpansDropped func() export.SpanDrops
	// Refused counts, per limit of the relay ("max_concurrent_streams",
	// "max_streams_per_connection", "max_pending_connections"), what it
	// turned away.
	Refused map[string]func() uint64
}

const outputDroppedHelp = "Records an output dropped because it fell behind (a blocked stderr, a slow capture file): log lines, capture records, retained pushes. The relay and the tracker never wait for an output."

// DefaultMaxNodes is Config.MaxNodes when left zero.
const DefaultMaxNodes = 100

// OverflowNode is the node label of every node past MaxNodes: what adstap
// status --prometheus recognizes as no node of its own.
const OverflowNode = "other"

// RelayStats is what the relay counts itself (tap.Server.Stats).
type RelayStats interface {
	Stats() map[codec.Protocol]codec.ProtocolStats
}

// RelayStatsFunc is a RelayStats made of a function.
type RelayStatsFunc func() map[codec.Protocol]codec.ProtocolStats

// Stats calls f.
func (f RelayStatsFunc) Stats() map[codec.Protocol]codec.ProtocolStats { return f() }

// Buckets that fit real xDS: istiod's push size histogram goes to 40 MB,
// Envoy's init_fetch_timeout is 15 s, a full sync over 5 s is worth a look.
var (
	latencyBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// 2, 3 MB and 4 MiB: within reach of gRPC's default receive limit
	// (4 MiB), the one proxyless clients hit first (AdstapPushNearReceiveLimit).
	sizeBuckets      = []float64{1e3, 1e4, 1e5, 1e6, 2e6, 3e6, 4e6, 4 << 20, 1e7, 2e7, 4e7, 1e8}
	resourceBuckets  = []float64{1, 10, 100, 1000, 5000, 10000, 50000, 100000}
	fullSyncBuckets  = []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	connectBuckets   = []float64{.0005, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	protocolsInOrder = []codec.Protocol{codec.SotW, codec.Delta, codec.Opaque}
)

// Metrics turns tracker events and relay counters into Prometheus metrics.
// Metric names are a public interface: see docs/metrics.md.
//
// It is an output (export.MetricsOutput) with no queue: each event is
// counted on the goroutine that tells it, so nothing waits and nothing is
// dropped.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry

	pushes, acks, nacks, stale, redundant, timeouts *prometheus.CounterVec
	pending                                         *prometheus.GaugeVec
	ackSeconds, pushBytes, pushResources            *prometheus.HistogramVec
	fullSyncs                                       *prometheus.CounterVec
	fullPushes                                      *prometheus.CounterVec
	fullSyncSeconds                                 prometheus.Histogram
	stormActive, loopActive                         *prometheus.GaugeVec
	storms, loops                                   *prometheus.CounterVec
	resyncActive                                    prometheus.Gauge
	resyncAlarms                                    prometheus.Counter
	herdActive                                      prometheus.Gauge
	herds                                           prometheus.Counter
	decodeErrors                                    *prometheus.CounterVec
	connectSeconds                                  *prometheus.HistogramVec
	connectFailures                                 *prometheus.CounterVec
	nodeOverflow                                    prometheus.Counter
	spansFolded                                     *prometheus.CounterVec
	// slots are the per-type series found once; nil with the node label.
	slots seriesSlots

	// The node label's values, when asked for: read without a lock on
	// every event; nodeMu is taken only to let a new node in, at most
	// MaxNodes times, and never once nodesFull is set.
	nodes     sync.Map // node id → struct{}
	nodeMu    sync.Mutex
	nodeCount int // guarded by nodeMu
	nodesFull atomic.Bool
	warned    atomic.Bool
}

var (
	_ track.Sink    = (*Metrics)(nil)
	_ export.Output = (*Metrics)(nil)
)

// New registers adstap's metrics, reading the relay's counters from
// cfg.Relay.
func New(cfg Config) *Metrics {
	if cfg.MaxNodes <= 0 {
		cfg.MaxNodes = DefaultMaxNodes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry()}
	typeLabels := []string{"type"}
	if cfg.NodeLabel {
		typeLabels = append(typeLabels, "node")
	} else {
		m.slots = newSeriesSlots()
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
		m.reg.MustRegister(h)
		return h
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(g)
		return g
	}
	with := func(extra ...string) []string { return append(append([]string(nil), typeLabels...), extra...) }

	m.pushes = counter("adstap_pushes_total", "Responses (pushes) sent to clients, by resource type.", typeLabels...)
	m.acks = counter("adstap_acks_total", "Pushes the client accepted (ACK).", typeLabels...)
	m.nacks = counter("adstap_nacks_total", "Pushes the client rejected (NACK: a request with error_detail).", typeLabels...)
	m.stale = counter("adstap_stale_nonces_total", "Requests answering a push other than the latest one of their type (stale nonce).", typeLabels...)
	m.redundant = counter("adstap_redundant_pushes_total", "Pushes that changed nothing the client had accepted.", typeLabels...)
	m.timeouts = counter("adstap_push_timeouts_total", "Pushes left unanswered for --push-timeout (the stream is STALE).", typeLabels...)
	m.pending = gauge("adstap_pushes_pending", "Pushes waiting for the client's answer now.", typeLabels...)
	m.ackSeconds = histogram("adstap_push_ack_seconds", "Time from a push crossing the tap to the client's ACK or NACK.", latencyBuckets, with("result")...)
	m.pushBytes = histogram("adstap_push_bytes", "Size of each push in bytes.", sizeBuckets, typeLabels...)
	m.pushResources = histogram("adstap_push_resources", "Resources in each push.", resourceBuckets, typeLabels...)
	m.fullSyncs = counter("adstap_full_syncs_total", "Pushes carrying the whole subscribed set of their type; reason initial for the first on a stream, repeated after.", with("reason")...)
	pushLabels := []string{"protocol"}
	if cfg.NodeLabel {
		pushLabels = append(pushLabels, "node")
	}
	m.fullPushes = counter("adstap_full_pushes_total", "Full pushes: push rounds that resent configuration (a type other than EDS and SDS) the client had not asked for, as istiod does after a config change; once per stream and version. Endpoint-only pushes and a stream's initial sync are not counted.", pushLabels...)
	m.fullSyncSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "adstap_full_sync_seconds",
		Help: "Time from a stream opening until every type it asked for had an acknowledged push.", Buckets: fullSyncBuckets})
	m.reg.MustRegister(m.fullSyncSeconds)
	m.stormActive = gauge("adstap_nack_storm_active", "Streams and types in a NACK storm now.", typeLabels...)
	m.storms = counter("adstap_nack_storms_total", "NACK storms started.", typeLabels...)
	m.loopActive = gauge("adstap_nack_loop_active", "Streams and types in a NACK loop (the same rejected content pushed again and again) now.", typeLabels...)
	m.loops = counter("adstap_nack_loops_total", "NACK loops started.", typeLabels...)
	m.resyncActive = prometheus.NewGauge(prometheus.GaugeOpts{Name: "adstap_repeated_full_sync_active", Help: "Nodes resent their whole configuration more than --full-sync-limit times within --full-sync-window, now."})
	m.resyncAlarms = prometheus.NewCounter(prometheus.CounterOpts{Name: "adstap_repeated_full_sync_alarms_total", Help: "Repeated full sync alarms raised."})
	m.nodeOverflow = prometheus.NewCounter(prometheus.CounterOpts{Name: "adstap_metrics_node_overflow_total", Help: "Events of nodes past --metrics-max-nodes, counted under node=\"other\"."})
	m.herdActive = prometheus.NewGauge(prometheus.GaugeOpts{Name: "adstap_reconnect_herd_active", Help: "1 while a reconnect herd is on (--herd-threshold streams opened within --herd-window), else 0."})
	m.herds = prometheus.NewCounter(prometheus.CounterOpts{Name: "adstap_reconnect_herds_total", Help: "Reconnect herds started."})
	m.reg.MustRegister(m.resyncActive, m.resyncAlarms, m.nodeOverflow, m.herdActive, m.herds)
	m.decodeErrors = counter("adstap_decode_errors_total", "Frames whose envelope could not be decoded; they were relayed unchanged.", "type")
	m.connectSeconds = histogram("adstap_upstream_connect_seconds", "Time each phase of connecting upstream took: dns, tcp, tls, and first_response (stream open to first push).", connectBuckets, "phase")
	m.connectFailures = counter("adstap_upstream_connect_failures_total", "Upstream connections that failed, by the phase that failed.", "reason")
	for _, reason := range []string{"dns", "tcp", "tls"} {
		m.connectFailures.WithLabelValues(reason) // from 0, for increase()
	}

	m.spansFolded = counter("adstap_spans_folded_total", "Pushes folded into an episode span rather than written as spans of their own: repeats of the same push and answer, NACKs in a storm or loop, pushes past --trace-max-spans-per-stream in one trace; the exemplar names the latest episode's span.", "type")
	drops := cfg.SpansDropped
	if drops == nil {
		drops = func() export.SpanDrops { return export.SpanDrops{} }
	}
	m.reg.MustRegister(spanDropsCollector{drops})
	for limit, n := range cfg.Refused {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "adstap_refused_total",
			Help:        "Streams (ResourceExhausted) and connections (closed unread) the tap turned away at a limit: --max-concurrent-streams, --max-streams-per-connection, --max-pending-connections.",
			ConstLabels: prometheus.Labels{"limit": limit}}, func() float64 { return float64(n()) }))
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "adstap_build_info", Help: "adstap's version and Go version; always 1."}, []string{"version", "goversion"})
	build.WithLabelValues(cfg.Version, runtime.Version()).Set(1)
	m.reg.MustRegister(build, relayCollector{cfg.Relay}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// WatchKept reports what the tracker keeps of unanswered pushes for their
// NACKs (track.Tracker.Kept), read at scrape time.
func (m *Metrics) WatchKept(kept func() track.KeptStats) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "adstap_nack_kept_bytes",
			Help: "Bytes of unanswered pushes kept so that a NACK can name what it rejected (--nack-keep-bytes)."},
			func() float64 { return float64(kept().Bytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "adstap_nack_not_kept_total",
			Help: "Pushes not kept for their NACK because --nack-keep-bytes was reached: a NACK of one cannot name the objects it rejected."},
			func() float64 { return float64(kept().Skipped) }))
}

// WatchObserveQueue reports what the relay's observation queues hold
// (tap.Server.ObserveQueue), read at scrape time: the bytes of frames
// waiting for observation now, and the frames larger than
// --observe-queue-bytes observed apart from it.
func (m *Metrics) WatchObserveQueue(bytes func() int64, overBound func() uint64) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "adstap_observe_queue_bytes",
			Help: "Bytes of relayed frames waiting for observation now (--observe-queue-bytes, plus one larger frame)."},
			func() float64 { return float64(bytes()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "adstap_observe_over_bound_total",
			Help: "Frames larger than --observe-queue-bytes that were observed, one at a time, apart from the bound, rather than skipped."},
			func() float64 { return float64(overBound()) }))
}

// WatchConnectReports reports, read at scrape time, the upstream connect
// reports the relay dropped rather than wait for a slow observer
// (tap.Server.DroppedConnectReports): connect phases and failures that
// adstap_upstream_connect_seconds and adstap_upstream_connect_failures_total
// never saw.
func (m *Metrics) WatchConnectReports(dropped func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "adstap_upstream_connect_reports_dropped_total",
		Help: "Reports of upstream connection attempts dropped because the observer had fallen behind: phases and failures the upstream connect metrics do not count."},
		func() float64 { return float64(dropped()) }))
}

// Name is export.MetricsOutput.
func (m *Metrics) Name() string { return export.MetricsOutput }

// Dropped is 0: the metrics have no queue to fall behind on. An event of a
// node past MaxNodes is counted too, as node="other"
// (adstap_metrics_node_overflow_total), not dropped.
func (m *Metrics) Dropped() uint64 { return 0 }

// Close has nothing to write out: every event was counted when told. The
// registry stays readable, for a scrape during the shutdown.
func (m *Metrics) Close(context.Context) error { return nil }

// Registry is where the metrics live, for other exporters to add theirs.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves /metrics: Prometheus text by default, OpenMetrics (with
// exemplars) to scrapers that ask for it.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true, Registry: m.reg})
}

// OnEvent updates the metrics an event bears on.
func (m *Metrics) OnEvent(e track.Event) {
	switch e := e.(type) {
	case track.StreamOpened:
		if e.Stream.Protocol != codec.Opaque {
			l := []string{string(e.Stream.Protocol)}
			if !m.cfg.NodeLabel {
				m.fullPushes.WithLabelValues(l...) // from 0, for increase()
			}
		}
	case track.PushSent:
		p := e.Push
		l := m.labels(p.TypeURL, p.Node.ID)
		s := m.series(l[0], true)
		if s != nil {
			s.pushes.Inc()
			s.pending.Inc()
			s.pushBytes.Observe(float64(p.Bytes))
			s.pushResources.Observe(float64(p.Resources))
		} else {
			m.pushes.WithLabelValues(l...).Inc()
			m.pending.WithLabelValues(l...).Inc()
			// Outcome counters start at 0 with the type's first push, so that
			// increase() in alert rules sees the first ACK, NACK or timeout
			// (series, made with the type's first push, makes them too).
			m.acks.WithLabelValues(l...)
			m.nacks.WithLabelValues(l...)
			m.timeouts.WithLabelValues(l...)
			m.pushBytes.WithLabelValues(l...).Observe(float64(p.Bytes))
			m.pushResources.WithLabelValues(l...).Observe(float64(p.Resources))
		}
		if p.Redundant {
			m.redundant.WithLabelValues(l...).Inc()
		}
		if p.FullSync {
			reason := "repeated"
			if p.Initial {
				reason = "initial"
			}
			m.fullSync(s, l, reason).Inc()
		}
		if p.First && p.Ref != nil {
			m.connectSeconds.WithLabelValues("first_response").Observe(p.SentAt.Sub(p.Ref.Meta.OpenedAt).Seconds())
		}
	case track.PushEnded:
		l := m.labels(e.Push.TypeURL, e.Push.Node.ID)
		s := m.series(l[0], false)
		if s == nil {
			s = m.lookUp(l)
		}
		s.pending.Dec()
		switch e.Result {
		case track.ResultACK:
			s.acks.Inc()
			m.observeLatency(s, l, "ack", e.Latency, e.Push, e.At)
		case track.ResultNACK:
			s.nacks.Inc()
			m.observeLatency(s, l, "nack", e.Latency, e.Push, e.At)
		case track.ResultTimeout:
			s.timeouts.Inc()
		}
	case track.LateAnswer:
		l := m.labels(e.Push.TypeURL, e.Push.Node.ID)
		s := m.series(l[0], false)
		if s == nil {
			s = m.lookUp(l)
		}
		if e.Result == track.ResultNACK {
			s.nacks.Inc()
		} else {
			s.acks.Inc()
		}
		m.observeLatency(s, l, string(e.Result), e.Latency, e.Push, e.At)
	case track.RequestSeen:
		if e.Kind == track.KindStale {
			m.stale.WithLabelValues(m.labels(e.TypeURL, e.Node.ID)...).Inc()
		}
	case track.FullPush:
		var proto codec.Protocol
		if e.Ref != nil {
			proto = e.Ref.Meta.Protocol
		}
		l := []string{string(proto)}
		if m.cfg.NodeLabel {
			l = append(l, m.labels("", e.Node.ID)[1])
		}
		m.fullPushes.WithLabelValues(l...).Inc()
	case track.FullSyncComplete:
		observeWithExemplar(m.fullSyncSeconds, e.Elapsed.Seconds(), prometheus.Labels{"node_id": e.Node.ID})
	case track.DetectorStarted:
		m.detector(e.Detector, e.TypeURL, e.Node, 1)
	case track.DetectorEnded:
		m.detector(e.Detector, e.TypeURL, e.Node, -1)
	case track.DecodeError:
		t := codec.ShortTypeOther
		if e.TypeURL != "" {
			t = codec.ShortType(e.TypeURL)
		}
		m.decodeErrors.WithLabelValues(t).Inc()
	case track.UpstreamConnected:
		c := e.UpstreamConnect
		for _, ph := range []struct {
			name string
			d    time.Duration
		}{{"dns", c.DNS}, {"tcp", c.TCP}, {"tls", c.TLS}} {
			if ph.d > 0 && (c.Err == nil || ph.name != c.FailedPhase) {
				m.connectSeconds.WithLabelValues(ph.name).Observe(ph.d.Seconds())
			}
		}
		if c.Err != nil {
			m.connectFailures.WithLabelValues(c.FailedPhase).Inc()
		}
	}
}

func (m *Metrics) detector(name, typeURL, node string, delta float64) {
	switch name {
	case track.DetectorNACKStorm:
		l := m.labels(typeURL, node)
		m.stormActive.WithLabelValues(l...).Add(delta)
		if delta > 0 {
			m.storms.WithLabelValues(l...).Inc()
		}
	case track.DetectorNACKLoop:
		l := m.labels(typeURL, node)
		m.loopActive.WithLabelValues(l...).Add(delta)
		if delta > 0 {
			m.loops.WithLabelValues(l...).Inc()
		}
	case track.DetectorRepeatedFullSync:
		m.resyncActive.Add(delta)
		if delta > 0 {
			m.resyncAlarms.Inc()
		}
	case track.DetectorReconnectHerd:
		m.herdActive.Add(delta)
		if delta > 0 {
			m.herds.Inc()
		}
	}
}

func (m *Metrics) observeLatency(s *typeSeries, l []string, result string, d time.Duration, p *track.Push, at time.Time) {
	o := m.latency(s, l, result)
	if !s.exemplarDue(result, d.Seconds(), at) {
		o.Observe(d.Seconds())
		return
	}
	// The exemplar's labels are copied by the histogram, so one map per
	// goroutine at a time does for every answer.
	ex := exemplarLabels.Get().(prometheus.Labels)
	defer func() {
		clear(ex)
		exemplarLabels.Put(ex)
	}()
	ex["node_id"] = p.Node.ID
	if m.cfg.TraceID != nil {
		if id := m.cfg.TraceID(p); id != "" {
			ex["trace_id"] = id
		}
	}
	observeWithExemplar(o, d.Seconds(), ex)
}

// SpansFolded counts a push of type typ (short) folded into an episode
// span; traceID and spanID, when set, name the episode's span for the
// exemplar (Tracing.CountFolds).
func (m *Metrics) SpansFolded(typ, traceID, spanID string) {
	c := m.spansFolded.WithLabelValues(typ)
	if traceID == "" {
		c.Inc()
		return
	}
	if ea, ok := c.(prometheus.ExemplarAdder); ok {
		ea.AddWithExemplar(1, prometheus.Labels{"trace_id": traceID, "span_id": spanID})
		return
	}
	c.Inc()
}

// spanDropsDesc is adstap_spans_dropped_total's, one series per reason.
var spanDropsDesc = prometheus.NewDesc("adstap_spans_dropped_total",
	"Spans that never reached the OTLP collector, by reason: queue_full (the span queue was full: the collector is slow or unreachable), export_failed (the collector refused them or did not answer in time), trace_limit (past --trace-max-spans-per-stream in one trace, with no episode span to fold into).",
	[]string{"reason"}, nil)

// spanDropsCollector reads the spans dropped at scrape time.
type spanDropsCollector struct{ drops func() export.SpanDrops }

func (c spanDropsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- spanDropsDesc }

func (c spanDropsCollector) Collect(ch chan<- prometheus.Metric) {
	d := c.drops()
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"queue_full", d.QueueFull}, {"export_failed", d.ExportFailed}, {"trace_limit", d.TraceLimit}} {
		ch <- prometheus.MustNewConstMetric(spanDropsDesc, prometheus.CounterValue, float64(r.n), r.reason)
	}
}

var exemplarLabels = sync.Pool{New: func() any { return prometheus.Labels{} }}

// maxExemplarRunes is OpenMetrics' limit on an exemplar's label names and
// values together.
const maxExemplarRunes = 128

// observeWithExemplar records v with an exemplar, shortening the node id to
// fit the exemplar limit: a trace id must survive whole, a node id can lose
// its tail.
func observeWithExemplar(o prometheus.Observer, v float64, ex prometheus.Labels) {
	total := 0
	for k, val := range ex {
		total += utf8.RuneCountInString(k) + utf8.RuneCountInString(val)
	}
	if over := total - maxExemplarRunes; over > 0 {
		node := []rune(ex["node_id"])
		ex["node_id"] = string(node[:max(0, len(node)-over)])
	}
	if ex["node_id"] == "" {
		delete(ex, "node_id")
	}
	if eo, ok := o.(prometheus.ExemplarObserver); ok && len(ex) > 0 {
		eo.ObserveWithExemplar(v, ex)
		return
	}
	o.Observe(v)
}

// labels are the label values of a per-type metric: the short type, and the
// node when asked for, capped at MaxNodes distinct values.
func (m *Metrics) labels(typeURL, node string) []string {
	t := codec.ShortType(typeURL)
	if !m.cfg.NodeLabel {
		if l, ok := typeLabelValues[t]; ok {
			return l
		}
		return []string{t}
	}
	return []string{t, m.nodeValue(node, true)}
}

// nodeValue is a node's label value: the node id while fewer than MaxNodes
// have one, else OverflowNode. An event past the cap is counted; a scrape
// reading state (count false) is not, since it repeats.
func (m *Metrics) nodeValue(node string, count bool) string {
	if _, ok := m.nodes.Load(node); ok {
		return node
	}
	if !m.nodesFull.Load() {
		shared.Taking("metrics.nodeMu")
		m.nodeMu.Lock()
		_, in := m.nodes.Load(node)
		if !in && m.nodeCount < m.cfg.MaxNodes {
			m.nodes.Store(node, struct{}{})
			m.nodeCount++
			in = true
		}
		m.nodesFull.Store(m.nodeCount >= m.cfg.MaxNodes)
		m.nodeMu.Unlock()
		if in {
			return node
		}
	}
	if count {
		m.nodeOverflow.Inc()
		if m.warned.CompareAndSwap(false, true) {
			m.cfg.Logger.Warn("metrics: more distinct nodes than --metrics-max-nodes; the rest are counted as node=\"other\"", "max_nodes", m.cfg.MaxNodes)
		}
	}
	return OverflowNode
}

// typeLabelValues are the label values of codec.ShortType's fixed set, made
// once. They are shared: their capacity is their length, so that appending
// a label value copies them.
var typeLabelValues = func() map[string][]string {
	m := map[string][]string{}
	for _, t := range shared.ShortTypes {
		m[t] = []string{t}[:1:1]
	}
	return m
}()

// relayCollector reads the relay's own counters at scrape time: they count
// every frame, observed or not.
type relayCollector struct{ relay RelayStats }

var (
	streamsActiveDesc = prometheus.NewDesc("adstap_streams_active", "Streams being relayed now.", []string{"protocol"}, nil)
	streamsOpenedDesc = prometheus.NewDesc("adstap_streams_opened_total", "Streams the tap has relayed.", []string{"protocol"}, nil)
	messagesDesc      = prometheus.NewDesc("adstap_messages_total", "Messages relayed, observed or not.", []string{"direction", "protocol"}, nil)
	bytesDesc         = prometheus.NewDesc("adstap_bytes_total", "Message bytes relayed.", []string{"direction", "protocol"}, nil)
)

func (relayCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- streamsActiveDesc
	ch <- streamsOpenedDesc
	ch <- messagesDesc
	ch <- bytesDesc
}

func (c relayCollector) Collect(ch chan<- prometheus.Metric) {
	if c.relay == nil {
		return
	}
	stats := c.relay.Stats()
	for _, p := range protocolsInOrder {
		s := stats[p]
		ch <- prometheus.MustNewConstMetric(streamsActiveDesc, prometheus.GaugeValue, float64(s.StreamsActive), string(p))
		ch <- prometheus.MustNewConstMetric(streamsOpenedDesc, prometheus.CounterValue, float64(s.StreamsOpened), string(p))
		for i, dir := range []codec.Direction{codec.DirectionRequest, codec.DirectionResponse} {
			ch <- prometheus.MustNewConstMetric(messagesDesc, prometheus.CounterValue, float64(s.Messages[i]), dir.String(), string(p))
			ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(s.Bytes[i]), dir.String(), string(p))
		}
	}
}

// WatchOutputs counts, per output, the work its queue dropped because the
// output fell behind (adstap_output_dropped_total{output=Name()}). Tracing
// is left out: its spans' losses have a metric of their own, by reason. So
// are the metrics and the upstream's health, which have no queue and drop
// nothing: a series that can never rise would say they might.
func (m *Metrics) WatchOutputs(outs ...export.Output) {
	for _, o := range outs {
		if o == nil {
			continue
		}
		switch o.Name() {
		case export.TracingOutput, export.MetricsOutput, export.UpstreamOutput:
			continue
		}
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "adstap_output_dropped_total", Help: outputDroppedHelp,
			ConstLabels: prometheus.Labels{"output": o.Name()}}, func() float64 { return float64(o.Dropped()) }))
	}
}
