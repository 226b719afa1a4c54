package metrics_test

import (
	"testing"
	"time"

	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promsum"
	"github.com/adstap/adstap/track"
)

// streamList is a tap's streams as the tracker sums them up.
type streamList []track.StreamSummary

func (l streamList) Summaries(buf []track.StreamSummary) []track.StreamSummary {
	return append(buf, l...)
}

// sample is a value a scrape should show: the sum of the series of metric
// that carry labels.
type sample struct {
	metric string
	labels map[string]string
	value  float64
}

func TestStreamStateMetrics(t *testing.T) {
	leakcheck.Check(t)
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	istiod := `{"Component":"istiod","ID":"istiod-5d7c9d8d9b-x2x4k"}`
	streams := streamList{
		{ID: 1, Node: "a", IstioVersion: "1.28.1", ControlPlane: istiod, Types: []track.TypeSummary{
			{Type: "cds", State: "SYNCED", LastSentAt: at, LastACKAt: at},
			{Type: "eds", State: "STALE", LastSentAt: at.Add(time.Minute), LastACKAt: at}}},
		{ID: 2, Node: "b", IstioVersion: "1.28.1", ControlPlane: istiod, Types: []track.TypeSummary{
			{Type: "cds", State: "NACKED", LastSentAt: at.Add(2 * time.Minute)}}},
		{ID: 3, Node: "c", UserAgent: "gRPC Go/1.85.0", Types: []track.TypeSummary{{Type: "cds", State: "NOT_SENT"}}},
	}
	for _, tc := range []struct {
		name      string
		nodeLabel bool
		want      []sample
	}{
		{"one series per type and state", false, []sample{
			{metrics.MetricStreamStates, map[string]string{"type": "cds", "state": "SYNCED"}, 1},
			{metrics.MetricStreamStates, map[string]string{"type": "cds", "state": "NACKED"}, 1},
			{metrics.MetricStreamStates, map[string]string{"type": "cds", "state": "NOT_SENT"}, 1},
			{metrics.MetricStreamStates, map[string]string{"type": "cds", "state": "STALE"}, 0},
			{metrics.MetricStreamStates, map[string]string{"type": "eds", "state": "STALE"}, 1},
			{metrics.MetricLastPush, map[string]string{"type": "cds"}, float64(at.Add(2 * time.Minute).Unix())},
			{metrics.MetricLastACK, map[string]string{"type": "cds"}, float64(at.Unix())},
			{metrics.MetricLastPush, map[string]string{"type": "eds"}, float64(at.Add(time.Minute).Unix())},
			{metrics.MetricProxyStreams, map[string]string{"version": "1.28.1", "control_plane": "istiod-5d7c9d8d9b-x2x4k"}, 2},
			{metrics.MetricProxyStreams, map[string]string{"version": "gRPC Go/1.85.0", "control_plane": ""}, 1},
		}},
		{"with the node label, capped", true, []sample{
			{metrics.MetricStreamStates, map[string]string{"type": "cds", "state": "SYNCED", "node": "a"}, 1},
			{metrics.MetricStreamStates, map[string]string{"type": "cds", "state": "NACKED", "node": "b"}, 1},
			{metrics.MetricStreamStates, map[string]string{"type": "cds", "state": "NOT_SENT", "node": "other"}, 1},
			{metrics.MetricLastACK, map[string]string{"type": "cds", "node": "b"}, 0},
			{metrics.MetricProxyStreams, map[string]string{"node": "other", "version": "gRPC Go/1.85.0"}, 1},
			{"adstap_metrics_node_overflow_total", nil, 0}, // a scrape is no event
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.New(metrics.Config{NodeLabel: tc.nodeLabel, MaxNodes: 2})
			m.WatchStreams(streams)
			for range 2 { // a second scrape says the same
				for _, w := range tc.want {
					got, err := promsum.Gathered(m.Registry(), w.metric, w.labels)
					if err != nil {
						t.Fatal(err)
					}
					if got != w.value {
						t.Errorf("%s%v = %v, want %v", w.metric, w.labels, got, w.value)
					}
				}
			}
		})
	}
}
