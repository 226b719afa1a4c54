package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promsum"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

func scrape(t *testing.T, admin string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// value reads one sample from a scrape: name{labels} in Prometheus syntax,
// e.g. `adstap_acks_total{type="cds"}`; histograms by their _count.
func value(t *testing.T, text []byte, series string) float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	want := map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = strings.Trim(v, `"`)
		}
	}
	base := strings.TrimSuffix(name, "_count")
	for _, f := range []*dto.MetricFamily{families[name], families[base]} {
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			if promsum.HasLabels(m, want) {
				return promsum.Value(m)
			}
		}
	}
	return 0
}

// TestScrapedMetricsMatchAScriptedScenario drives a known sequence through the
// tap with real peers — 8 pushes, 5 NACKs in a row (a storm and a loop), two
// full resyncs within a minute — and checks the scrape says exactly that.
func TestScrapedMetricsMatchAScriptedScenario(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	var log syncbuf.Buffer
	tapAddr, admin := startObservedTap(t, cp.Addr(), &log)
	const node = "sidecar~10.0.0.5~reviews-v1.default~default.svc.cluster.local"
	clusters := func(n int) map[resource.Type][]types.Resource {
		return map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(n, 0)}
	}
	cp.SetSnapshot(t, node, "2026-11-30T09:00:00Z/1", clusters(3))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, tapAddr))
	send := func(r *discovery.DiscoveryRequest) {
		t.Helper()
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() *discovery.DiscoveryResponse { return xdstest.RecvWithin(t, 10*time.Second, s.Recv) }
	ack := func(r *discovery.DiscoveryResponse) {
		send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	}

	send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.ClusterType})
	ack(recv()) // push 1: the initial full sync
	cp.SetSnapshot(t, node, "2026-11-30T09:00:05Z/2", clusters(4))
	for i := 0; i < 5; i++ { // pushes 2-6, each NACKed; go-control-plane re-sends at once
		r := recv()
		send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "2026-11-30T09:00:00Z/1", ResponseNonce: r.Nonce,
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: "cluster outbound|8080||svc-00003.ns-3.svc.cluster.local: rejected"}})
	}
	ack(recv()) // push 7: accepted at last
	// A new version starts a round of its own, however soon it comes.
	cp.SetSnapshot(t, node, "2026-11-30T09:00:10Z/3", clusters(5))
	ack(recv()) // push 8: the second full resync within a minute

	want := map[string]float64{
		`adstap_pushes_total{type="cds"}`:                               8,
		`adstap_acks_total{type="cds"}`:                                 3,
		`adstap_nacks_total{type="cds"}`:                                5,
		`adstap_pushes_pending{type="cds"}`:                             0,
		`adstap_push_ack_seconds_count{type="cds",result="ack"}`:        3,
		`adstap_push_ack_seconds_count{type="cds",result="nack"}`:       5,
		`adstap_nack_storms_total{type="cds"}`:                          1,
		`adstap_nack_storm_active{type="cds"}`:                          1,
		`adstap_nack_loops_total{type="cds"}`:                           1,
		`adstap_nack_loop_active{type="cds"}`:                           0,
		`adstap_full_syncs_total{type="cds",reason="initial"}`:          1,
		`adstap_full_syncs_total{type="cds",reason="repeated"}`:         7,
		`adstap_repeated_full_sync_alarms_total`:                        1,
		`adstap_full_pushes_total{protocol="sotw"}`:                     2, // v2 (re-sent after NACKs: once) and v3
		`adstap_streams_opened_total{protocol="sotw"}`:                  1,
		`adstap_streams_active{protocol="sotw"}`:                        1,
		`adstap_messages_total{direction="request",protocol="sotw"}`:    9,
		`adstap_messages_total{direction="response",protocol="sotw"}`:   8,
		`adstap_upstream_connect_seconds_count{phase="tcp"}`:            1,
		`adstap_upstream_connect_seconds_count{phase="first_response"}`: 1,
		`adstap_decode_errors_total{type="cds"}`:                        0,
	}
	// Metrics are updated as events are handled, one series after another,
	// and the relay counts a frame just after handing it to the observer:
	// scrape until every series says what the scenario did. Past the
	// deadline the comparison below shows what differs.
	var text []byte
	xdstest.Until(xdstest.WaitTimeout, func() bool {
		text = scrape(t, admin)
		for series, v := range want {
			if value(t, text, series) != v {
				return false
			}
		}
		return true
	})
	got := map[string]float64{}
	for series := range want {
		got[series] = value(t, text, series)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scraped metrics (-truth +scrape):\n%s", diff)
	}
	promtoolCheckMetrics(t, text)
}

// promtoolCheckMetrics lints a scrape with the real promtool. CI installs it;
// elsewhere the check is skipped when it is missing.
func promtoolCheckMetrics(t *testing.T, text []byte) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed; .ci/run installs it (apt-get install prometheus)")
		}
		t.Log("promtool not installed: skipping promtool check metrics (apt-get install prometheus)")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
