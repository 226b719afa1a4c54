package metrics

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/track"
)

// The series a mesh view (adstap status --prometheus, the alerts, the
// dashboard's Mesh row) reads to rebuild istioctl proxy-status across every
// tap Prometheus scrapes. They are read from the tracker at scrape time, so
// they say what is true now and leave no series behind a closed stream.
const (
	MetricStreamStates  = "adstap_stream_states"
	MetricLastPush      = "adstap_last_push_timestamp_seconds"
	MetricLastACK       = "adstap_last_ack_timestamp_seconds"
	MetricProxyStreams  = "adstap_proxy_streams"
	MetricUpstreamFail  = "adstap_upstream_failing"
	MetricUpstreamTries = "adstap_upstream_failed_attempts"
	MetricNotSent       = "adstap_resources_not_sent"
)

// maxProxyKinds bounds adstap_proxy_streams' series in one scrape: the
// distinct (version, control plane) pairs of a tap's streams, past which
// the rest are counted as other.
const maxProxyKinds = 32

// StreamSummaries is what the state collector reads (track.Tracker.Summaries).
type StreamSummaries interface {
	Summaries([]track.StreamSummary) []track.StreamSummary
}

// WatchStreams reports the state of every stream of the tap, read from
// streams at scrape time: per type, how many streams are in each state, when
// the type was last pushed and acknowledged, and which versions and
// control-plane replicas the proxies run with. With NodeLabel each series
// also has the node, capped as the other per-node series are.
func (m *Metrics) WatchStreams(streams StreamSummaries) {
	labels := []string{"type"}
	if m.cfg.NodeLabel {
		labels = append(labels, "node")
	}
	c := &stateCollector{m: m, streams: streams,
		states: prometheus.NewDesc(MetricStreamStates, "Streams whose type is in each state, as istioctl proxy-status says it: "+
			string(track.StateSynced)+" (the last push was ACKed), "+string(track.StateStale)+" (it awaits its answer), "+
			string(track.StateNACKed)+" (the latest answered push was rejected), "+string(track.StateNotSent)+" (asked for, nothing pushed yet).",
			append(slices.Clone(labels), "state"), nil),
		lastPush: prometheus.NewDesc(MetricLastPush, "When the type was last pushed to a stream of the tap (Unix seconds); absent before the first push.", labels, nil),
		lastACK:  prometheus.NewDesc(MetricLastACK, "When a stream of the tap last ACKed a push of the type (Unix seconds); 0 when pushed but never ACKed.", labels, nil),
		proxies: prometheus.NewDesc(MetricProxyStreams, "Streams now, by the proxy's version (ISTIO_VERSION, else its user agent) and the control-plane replica serving it (istiod's pod).",
			append(slices.Clone(labels[1:]), "version", "control_plane"), nil),
		notSent: prometheus.NewDesc(MetricNotSent, "Resources a proxy asks for by name and does not have: not sent within --initial-fetch-timeout of being asked for, or removed by the control plane while still asked for (DOES_NOT_EXIST in CSDS).", labels, nil),
	}
	m.reg.MustRegister(c)
}

type stateCollector struct {
	m                                  *Metrics
	streams                            StreamSummaries
	states, lastPush, lastACK, proxies *prometheus.Desc
	notSent                            *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.states
	ch <- c.lastPush
	ch <- c.lastACK
	ch <- c.proxies
	ch <- c.notSent
}

// typeKey is a series' type, and node when there is a node label.
type typeKey struct{ typ, node string }

type typeAgg struct {
	states            [len(track.States)]int // in track.States order
	lastPush, lastACK time.Time
	pushed            bool
	notSent           int
}

type proxyKey struct{ node, version, controlPlane string }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	nodeLabel := c.m.cfg.NodeLabel
	types := map[typeKey]*typeAgg{}
	proxies := map[proxyKey]int{}
	kinds := map[[2]string]bool{} // the distinct (version, control plane) pairs
	for _, s := range c.streams.Summaries(nil) {
		node := ""
		if nodeLabel {
			node = c.m.nodeValue(s.Node, false)
		}
		version := s.IstioVersion
		if version == "" {
			version = s.UserAgent
		}
		kind := [2]string{version, ControlPlaneName(s.ControlPlane)}
		if !kinds[kind] {
			if len(kinds) >= maxProxyKinds {
				kind = [2]string{OverflowNode, OverflowNode}
			}
			kinds[kind] = true
		}
		proxies[proxyKey{node, kind[0], kind[1]}]++
		for _, ts := range s.Types {
			k := typeKey{ts.Type, node}
			a := types[k]
			if a == nil {
				a = new(typeAgg)
				types[k] = a
			}
			if i := slices.Index(track.States[:], ts.State); i >= 0 {
				a.states[i]++
			}
			if !ts.LastSentAt.IsZero() {
				a.pushed = true
				if ts.LastSentAt.After(a.lastPush) {
					a.lastPush = ts.LastSentAt
				}
			}
			a.notSent += ts.NotSent
			if ts.LastACKAt.After(a.lastACK) {
				a.lastACK = ts.LastACKAt
			}
		}
	}
	for k, a := range types {
		l := []string{k.typ}
		if nodeLabel {
			l = append(l, k.node)
		}
		for i, state := range track.States {
			ch <- prometheus.MustNewConstMetric(c.states, prometheus.GaugeValue, float64(a.states[i]), append(slices.Clone(l), string(state))...)
		}
		ch <- prometheus.MustNewConstMetric(c.notSent, prometheus.GaugeValue, float64(a.notSent), l...)
		if a.pushed {
			ch <- prometheus.MustNewConstMetric(c.lastPush, prometheus.GaugeValue, unixSeconds(a.lastPush), l...)
			ch <- prometheus.MustNewConstMetric(c.lastACK, prometheus.GaugeValue, unixSeconds(a.lastACK), l...)
		}
	}
	for k, n := range proxies {
		var l []string
		if nodeLabel {
			l = append(l, k.node)
		}
		ch <- prometheus.MustNewConstMetric(c.proxies, prometheus.GaugeValue, float64(n), append(l, k.version, k.controlPlane)...)
	}
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// WatchUpstream reports how the tap's connections to its control plane
// fare: adstap_upstream_failing{reason} is 1 for the reason of the latest
// attempt while it fails (every reason is there, from 0, so that a rule sees
// the change), and adstap_upstream_failed_attempts counts the attempts that
// failed since the last that succeeded.
func (m *Metrics) WatchUpstream(u *upstream.Health) {
	m.reg.MustRegister(&upstreamCollector{u: u,
		failing: prometheus.NewDesc(MetricUpstreamFail, "1 while the tap's latest connection attempt to its control plane failed, for the reason it failed (certificate_expired, unknown_authority, wrong_name, tls, dns, refused, timeout, tcp); else 0.", []string{"reason"}, nil),
		tries:   prometheus.NewDesc(MetricUpstreamTries, "Connection attempts to the control plane that failed since the last that succeeded.", nil, nil),
	})
}

type upstreamCollector struct {
	u              *upstream.Health
	failing, tries *prometheus.Desc
}

func (c *upstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.failing
	ch <- c.tries
}

func (c *upstreamCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.u.State()
	for _, r := range upstream.Reasons {
		v := 0.0
		if st.State == upstream.Failing && st.Reason == r {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, v, r)
	}
	ch <- prometheus.MustNewConstMetric(c.tries, prometheus.GaugeValue, float64(st.FailedAttempts))
}

// ControlPlaneName shortens istiod's identifier, a JSON object naming its
// pod ({"Component":"istiod","ID":"istiod-5d7c…",...}), to the pod; other
// control planes' identifiers are kept whole.
func ControlPlaneName(id string) string {
	var istiod struct{ ID string }
	if strings.HasPrefix(id, "{") && json.Unmarshal([]byte(id), &istiod) == nil && istiod.ID != "" {
		return istiod.ID
	}
	return id
}
