package metrics_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func noRelay() map[codec.Protocol]codec.ProtocolStats { return nil }

func TestMetricsFollowEvents(t *testing.T) {
	leakcheck.Check(t)
	m := metrics.New(metrics.Config{Version: "v-test", TraceID: func(p *track.Push) string { return "4bf92f3577b34da6a3ce929d0e0e4736" },
		Relay: metrics.RelayStatsFunc(func() map[codec.Protocol]codec.ProtocolStats {
			return map[codec.Protocol]codec.ProtocolStats{codec.Delta: {StreamsActive: 1, StreamsOpened: 3, Messages: [2]uint64{10, 7}, Bytes: [2]uint64{1000, 70000}}}
		})})
	push := cdsPush("v1")
	push.FullSync, push.Initial = true, true
	redundant := cdsPush("v2")
	redundant.Redundant, redundant.FullSync = true, true
	events := []track.Event{
		track.StreamOpened{Stream: track.StreamMeta{ID: 3, OpenedAt: t0.Add(-50 * time.Millisecond)}},
		track.PushSent{Push: new(push)},
		track.PushEnded{Push: new(push), Result: track.ResultACK, Latency: 14 * time.Millisecond},
		track.PushSent{Push: new(redundant)},
		track.PushEnded{Push: new(redundant), Result: track.ResultNACK, Latency: 3 * time.Millisecond, Error: "bad"},
		track.PushSent{Push: new(cdsPush("v3"))},
		track.PushEnded{Push: new(cdsPush("v3")), Result: track.ResultTimeout, Latency: 30 * time.Second},
		track.LateAnswer{Push: new(cdsPush("v3")), Result: track.ResultACK, Latency: 31 * time.Second},
		track.RequestSeen{StreamID: 3, TypeURL: codec.TypeCluster, Kind: track.KindStale},
		track.FullSyncComplete{StreamID: 3, Node: track.Node{ID: node}, Elapsed: 2 * time.Second},
		track.DetectorStarted{Detector: track.DetectorNACKStorm, TypeURL: codec.TypeCluster},
		track.DetectorStarted{Detector: track.DetectorNACKLoop, TypeURL: codec.TypeCluster},
		track.DetectorEnded{Detector: track.DetectorNACKLoop, TypeURL: codec.TypeCluster},
		track.DetectorStarted{Detector: track.DetectorRepeatedFullSync, Node: node},
		track.DetectorStarted{Detector: track.DetectorReconnectHerd, Key: "tap"},
		track.DecodeError{StreamID: 3, Direction: codec.DirectionRequest, Err: fmt.Errorf("truncated")},
		track.UpstreamConnected{UpstreamConnect: codec.UpstreamConnect{DNS: time.Millisecond, TCP: time.Millisecond, TLS: 5 * time.Millisecond}},
		track.UpstreamConnected{UpstreamConnect: codec.UpstreamConnect{TCP: time.Millisecond, FailedPhase: "tcp", Err: fmt.Errorf("refused")}},
	}
	for _, e := range eventtest.Tracked(events...) {
		m.OnEvent(e)
	}
	if problems, err := testutil.GatherAndLint(m.Registry()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	want := `
# HELP adstap_pushes_total Responses (pushes) sent to clients, by resource type.
# TYPE adstap_pushes_total counter
adstap_pushes_total{type="cds"} 3
# HELP adstap_acks_total Pushes the client accepted (ACK).
# TYPE adstap_acks_total counter
adstap_acks_total{type="cds"} 2
# HELP adstap_nacks_total Pushes the client rejected (NACK: a request with error_detail).
# TYPE adstap_nacks_total counter
adstap_nacks_total{type="cds"} 1
# HELP adstap_redundant_pushes_total Pushes that changed nothing the client had accepted.
# TYPE adstap_redundant_pushes_total counter
adstap_redundant_pushes_total{type="cds"} 1
# HELP adstap_push_timeouts_total Pushes left unanswered for --push-timeout (the stream is STALE).
# TYPE adstap_push_timeouts_total counter
adstap_push_timeouts_total{type="cds"} 1
# HELP adstap_pushes_pending Pushes waiting for the client's answer now.
# TYPE adstap_pushes_pending gauge
adstap_pushes_pending{type="cds"} 0
# HELP adstap_stale_nonces_total Requests answering a push other than the latest one of their type (stale nonce).
# TYPE adstap_stale_nonces_total counter
adstap_stale_nonces_total{type="cds"} 1
# HELP adstap_full_syncs_total Pushes carrying the whole subscribed set of their type; reason initial for the first on a stream, repeated after.
# TYPE adstap_full_syncs_total counter
adstap_full_syncs_total{reason="initial",type="cds"} 1
adstap_full_syncs_total{reason="repeated",type="cds"} 1
# HELP adstap_nack_storm_active Streams and types in a NACK storm now.
# TYPE adstap_nack_storm_active gauge
adstap_nack_storm_active{type="cds"} 1
# HELP adstap_nack_loop_active Streams and types in a NACK loop (the same rejected content pushed again and again) now.
# TYPE adstap_nack_loop_active gauge
adstap_nack_loop_active{type="cds"} 0
# HELP adstap_nack_loops_total NACK loops started.
# TYPE adstap_nack_loops_total counter
adstap_nack_loops_total{type="cds"} 1
# HELP adstap_repeated_full_sync_alarms_total Repeated full sync alarms raised.
# TYPE adstap_repeated_full_sync_alarms_total counter
adstap_repeated_full_sync_alarms_total 1
# HELP adstap_reconnect_herd_active 1 while a reconnect herd is on (--herd-threshold streams opened within --herd-window), else 0.
# TYPE adstap_reconnect_herd_active gauge
adstap_reconnect_herd_active 1
# HELP adstap_reconnect_herds_total Reconnect herds started.
# TYPE adstap_reconnect_herds_total counter
adstap_reconnect_herds_total 1
# HELP adstap_decode_errors_total Frames whose envelope could not be decoded; they were relayed unchanged.
# TYPE adstap_decode_errors_total counter
adstap_decode_errors_total{type="cds"} 1
# HELP adstap_upstream_connect_failures_total Upstream connections that failed, by the phase that failed.
# TYPE adstap_upstream_connect_failures_total counter
adstap_upstream_connect_failures_total{reason="dns"} 0
adstap_upstream_connect_failures_total{reason="tcp"} 1
adstap_upstream_connect_failures_total{reason="tls"} 0
# HELP adstap_streams_opened_total Streams the tap has relayed.
# TYPE adstap_streams_opened_total counter
adstap_streams_opened_total{protocol="delta"} 3
adstap_streams_opened_total{protocol="opaque"} 0
adstap_streams_opened_total{protocol="sotw"} 0
# HELP adstap_bytes_total Message bytes relayed.
# TYPE adstap_bytes_total counter
adstap_bytes_total{direction="request",protocol="delta"} 1000
adstap_bytes_total{direction="request",protocol="opaque"} 0
adstap_bytes_total{direction="request",protocol="sotw"} 0
adstap_bytes_total{direction="response",protocol="delta"} 70000
adstap_bytes_total{direction="response",protocol="opaque"} 0
adstap_bytes_total{direction="response",protocol="sotw"} 0
`
	names := []string{"adstap_pushes_total", "adstap_acks_total", "adstap_nacks_total", "adstap_redundant_pushes_total", "adstap_push_timeouts_total",
		"adstap_pushes_pending", "adstap_stale_nonces_total", "adstap_full_syncs_total", "adstap_nack_storm_active", "adstap_nack_loop_active",
		"adstap_nack_loops_total", "adstap_repeated_full_sync_alarms_total", "adstap_reconnect_herd_active", "adstap_reconnect_herds_total", "adstap_decode_errors_total", "adstap_upstream_connect_failures_total",
		"adstap_streams_opened_total", "adstap_bytes_total"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	// 14ms ACK, 3ms NACK and a 31s late ACK, each with its exemplar.
	var exemplars []string
	for _, metric := range byName["adstap_push_ack_seconds"].GetMetric() {
		for _, b := range metric.GetHistogram().GetBucket() {
			if ex := b.GetExemplar(); ex != nil {
				var kv []string
				for _, l := range ex.GetLabel() {
					kv = append(kv, l.GetName()+"="+l.GetValue())
				}
				exemplars = append(exemplars, strings.Join(kv, ","))
			}
		}
	}
	if len(exemplars) != 3 || !strings.Contains(exemplars[0], "trace_id=4bf92f3577b34da6a3ce929d0e0e4736") || !strings.Contains(exemplars[0], "node_id=sidecar~") {
		t.Errorf("push_ack_seconds exemplars = %q, want 3 with node_id and trace_id", exemplars)
	}
	connects := map[string]uint64{}
	for _, metric := range byName["adstap_upstream_connect_seconds"].GetMetric() {
		connects[metric.GetLabel()[0].GetValue()] = metric.GetHistogram().GetSampleCount()
	}
	if want := map[string]uint64{"dns": 1, "tcp": 1, "tls": 1, "first_response": 1}; fmt.Sprint(connects) != fmt.Sprint(want) {
		t.Errorf("connect phases observed %v, want %v (the failed tcp phase is a failure, not a duration)", connects, want)
	}
	if got := byName["adstap_full_sync_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); got != 2 {
		t.Errorf("full sync seconds sum %v, want 2", got)
	}
	if got := byName["adstap_build_info"].GetMetric()[0].GetLabel(); got[1].GetValue() != "v-test" {
		t.Errorf("build_info labels %v", got)
	}
}

func TestMetricsCardinalityIsBounded(t *testing.T) {
	leakcheck.Check(t)
	series := func(m *metrics.Metrics) int {
		families, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range families {
			if strings.HasPrefix(f.GetName(), "adstap_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	feed := func(m *metrics.Metrics, nodes, types int) {
		for i := 0; i < nodes; i++ {
			for j := 0; j < types; j++ {
				p := track.Push{StreamID: uint64(i), Node: track.Node{ID: fmt.Sprintf("sidecar~10.0.%d.%d~pod-%d.ns~ns.svc.cluster.local", i/250, i%250, i)},
					TypeURL: fmt.Sprintf("type.googleapis.com/vendor.custom.v%d.Thing", j), FullSync: true}
				m.OnEvent(track.PushSent{Push: new(p)})
				m.OnEvent(track.PushEnded{Push: new(p), Result: track.ResultNACK, Latency: time.Millisecond})
				m.OnEvent(track.RequestSeen{TypeURL: p.TypeURL, Node: p.Node, Kind: track.KindStale})
			}
		}
	}
	for _, tc := range []struct {
		name      string
		cfg       metrics.Config
		maxSeries int
	}{
		{"no node label", metrics.Config{}, 42},
		{"node label capped", metrics.Config{NodeLabel: true, MaxNodes: 20}, 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Relay = metrics.RelayStatsFunc(noRelay)
			small := metrics.New(cfg)
			feed(small, 10, 2)
			big := metrics.New(cfg)
			feed(big, 3000, 50) // 3,000 nodes, 50 unknown type URLs
			t.Logf("series: small %d, big %d", series(small), series(big))
			if got := series(big); got > tc.maxSeries {
				t.Errorf("%d series after 3,000 nodes and 50 unknown types, want at most %d", got, tc.maxSeries)
			}
			if !tc.cfg.NodeLabel && series(big) != series(small) {
				t.Errorf("series grew with nodes and types: %d with 10 nodes and 2 types, %d with 3,000 and 50", series(small), series(big))
			}
		})
	}
}

// TestConnectReportsDroppedIsReadAtScrape: the counter shows what the relay
// says it dropped at the moment of the scrape.
func TestConnectReportsDroppedIsReadAtScrape(t *testing.T) {
	leakcheck.Check(t)
	m := metrics.New(metrics.Config{Version: "v-test", Relay: metrics.RelayStatsFunc(noRelay)})
	var dropped uint64
	m.WatchConnectReports(func() uint64 { return dropped })
	for _, n := range []uint64{0, 7} {
		dropped = n
		want := fmt.Sprintf(`# HELP adstap_upstream_connect_reports_dropped_total Reports of upstream connection attempts dropped because the observer had fallen behind: phases and failures the upstream connect metrics do not count.
# TYPE adstap_upstream_connect_reports_dropped_total counter
adstap_upstream_connect_reports_dropped_total %d
`, n)
		if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "adstap_upstream_connect_reports_dropped_total"); err != nil {
			t.Errorf("with %d dropped: %v", n, err)
		}
	}
}
