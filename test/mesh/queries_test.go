package mesh_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promtest"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/track"
)

// fleet is what a tap with --metrics-node-label in front of n proxies
// reports: export's own collector over n streams, one a proxy each.
type fleet struct{ n atomic.Int64 }

func (f *fleet) Summaries(buf []track.StreamSummary) []track.StreamSummary {
	now := time.Now()
	for i := range int(f.n.Load()) {
		state := track.StateSynced
		if i%50 == 7 {
			state = track.StateNACKed
		}
		buf = append(buf, track.StreamSummary{
			ID: uint64(i + 1), Node: fmt.Sprintf("sidecar~10.1.%d.%d~ratings-%04d.shop~shop.svc.cluster.local", i/250, i%250, i),
			IstioVersion: "1.28.1", ControlPlane: `{"Component":"istiod","ID":"istiod-5d7c9d8d9b-x2x4k"}`,
			Types: []track.TypeSummary{{Type: "cds", State: state, LastSentAt: now.Add(-time.Minute), LastACKAt: now.Add(-time.Minute)}},
		})
	}
	return buf
}

// countingProxy stands in front of Prometheus and counts the API requests
// that reach it, as the round tripper of Prometheus's client sends them.
type countingProxy struct {
	mu    sync.Mutex
	paths []string
}

func (c *countingProxy) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.paths
	c.paths = nil
	return p
}

// TestStatusPrometheusQueriesDoNotGrowWithProxies: status --prometheus asks
// Prometheus the same number of queries for 1,000 proxies as for 10. A
// real Prometheus scrapes a tap's metrics (export's collector with a node
// label, over 10 streams, then 1,000); a proxy in front of Prometheus counts
// the requests.
func TestStatusPrometheusQueriesDoNotGrowWithProxies(t *testing.T) {
	leakcheck.Check(t)
	bin := adstapbin.Build(t)
	var streams fleet
	m := metrics.New(metrics.Config{NodeLabel: true, MaxNodes: 2000, Version: "test"})
	m.WatchStreams(&streams)
	target := httptest.NewServer(m.Handler())
	t.Cleanup(target.Close) // after Prometheus, which scrapes it, stops
	// A scrape of 1,000 node-labelled streams takes seconds under the race
	// detector on a busy machine: the interval (and the timeout) leaves room.
	prom := promtest.Start(t, 5*time.Second, promtest.Target{Addr: strings.TrimPrefix(target.URL, "http://"), Labels: map[string]string{"pod": "adstap-7f9c", "namespace": "istio-system"}})

	promURL, _ := url.Parse(prom.URL)
	var counted countingProxy
	rp := httputil.NewSingleHostReverseProxy(promURL)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		counted.mu.Lock()
		counted.paths = append(counted.paths, r.URL.Path)
		counted.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	queries := map[int][]string{}
	for _, n := range []int{10, 1000} {
		streams.n.Store(int64(n))
		var rows int
		start := time.Now()
		resp, err := http.Get(target.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%d proxies: a scrape of %d bytes took %s", n, len(body), time.Since(start).Round(time.Millisecond))
		xdstest.EventuallyWithin(t, 90*time.Second, fmt.Sprintf("Prometheus has %d proxies", n), func() bool {
			_, out, _ := status(t, bin, "--prometheus", prom.URL, "-o", "json")
			var rep meshReport
			rows = -1
			if json.Unmarshal([]byte(out), &rep) == nil {
				rows = len(rep.Proxies)
			}
			return rows == n
		})
		counted.take()
		start = time.Now()
		code, out, stderr := status(t, bin, "--prometheus", front.URL)
		took := time.Since(start)
		queries[n] = counted.take()
		if code != 3 || !strings.Contains(out, "ratings-0007.shop") || stderr != "" {
			t.Errorf("%d proxies: exit %d (want 3: some NACK), stderr %q:\n%.2000s", n, code, stderr, out)
		}
		t.Logf("%d proxies: %d requests to Prometheus %v, status took %s", n, len(queries[n]), queries[n], took.Round(time.Millisecond))
	}
	if len(queries[10]) != len(queries[1000]) || len(queries[10]) > 2 {
		t.Errorf("requests to Prometheus: %v for 10 proxies, %v for 1,000; want the same, at most 2 (the state, the NACKs' exemplars)", queries[10], queries[1000])
	}
}
