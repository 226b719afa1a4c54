package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// TestANACKLoopIsOneReadableTraceInJaeger: go-control-plane's snapshot
// cache re-sends a cluster with lb_policy MAGLEV the moment grpc-go's xDS
// client NACKs it, thousands of times a second, through a tap that traces
// into a real Jaeger, for 4 s (20 s with ADSTAP_SOAK=1). The looping
// version's trace stays small: at most 1,000 spans and 4 MiB, the first
// NACK a span of its own with grpc-go's message and the DestinationRule,
// the rest folded into an episode span that counts them, every NACK the
// tap counted accounted for once; adstap rollout names the NACK and its
// count with exit 3, the same from the HTTP URL and the gRPC address.
func TestANACKLoopIsOneReadableTraceInJaeger(t *testing.T) {
	leakcheck.Check(t)
	duration := 4 * time.Second
	if os.Getenv("ADSTAP_SOAK") == "1" {
		duration = 20 * time.Second
	}
	j := jaegertest.Start(t)
	service := fmt.Sprintf("adstap-fold-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=greeter-client,k8s.namespace.name=shop")
	const node = "proxyless~10.0.0.3~greeter-client.shop~shop.svc.cluster.local"
	const version = "2026-12-03T08:00:00Z/1"

	backend := xdstest.StartBackend(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), xdstest.WithoutRecording())
	var log syncbuf.Buffer
	tapAddr, admin := startTracedTap(t, cp.Addr(), &log, "--otlp-endpoint=http://"+j.OTLPGRPC)
	res := xdsconfig.ResolverResourcesMaglev("greeter", backend)
	res[resource.ClusterType][0].(*clusterv3.Cluster).Metadata = xdsconfig.IstioConfig("destination-rule", "shop", "greeter-maglev")
	cp.SetSnapshot(t, node, version, res)

	nacks := func() float64 { return value(t, scrape(t, admin), `adstap_nacks_total{type="cds"}`) }
	cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tapAddr, node)))
	cc.Connect()
	xdstest.Eventually(t, "grpc-go's xDS client NACKing the cluster", func() bool { return nacks() > 0 })
	start, first := time.Now(), nacks()
	<-time.After(duration) // the length of the loop, not a wait for anything
	elapsed, looped := time.Since(start), nacks()-first
	cc.Close()
	// The stream's end ends the episode; the tap then counts no more NACKs.
	// The relay's count of streams drops as the stream ends, before the
	// observation has tracked the frames still queued: the tracker's list
	// of streams drops it once it has tracked them all, and counted their
	// NACKs.
	var total float64
	xdstest.Eventually(t, "the looping stream closed and its frames tracked", func() bool {
		if len(getStreams(t, admin, "").Streams) != 0 {
			return false
		}
		total = value(t, scrape(t, admin), `adstap_nacks_total{type="cds"}`)
		return true
	})
	t.Logf("FIGURE nack-loop-traced: %.0f NACKs/s through the tap for %s (%.0f NACKs in all)", looped/elapsed.Seconds(), elapsed.Round(time.Millisecond), total)
	// The loop runs at thousands a second on an idle machine and at a
	// hundred on one loaded by other tests; a handful says it did not run.
	if looped < 50 {
		t.Fatalf("%.0f NACKs in %s: the loop did not run (log:\n%s)", looped, elapsed.Round(time.Millisecond), log.String())
	}

	// Every NACK the tap counted is in Jaeger once: a span of its own or
	// an episode's count.
	traceOf := tracing.VersionTraceID("", version).String()
	var counted float64
	inJaeger := xdstest.Until(60*time.Second, func() bool {
		counted = 0
		for _, tr := range j.Traces(t, service, map[string]string{"xds.result": "nack"}) {
			for _, s := range tr.Spans {
				if r, _ := s.Tag("xds.result"); r != "nack" {
					continue
				}
				if n, ok := s.Tag("xds.folded.nacks"); ok {
					counted += float64(n.(int64))
				} else {
					counted++
				}
			}
		}
		return counted == total
	})
	if !inJaeger {
		text := scrape(t, admin)
		t.Fatalf("Jaeger holds %.0f NACKs (spans of their own and folded counts), the tap counted %.0f; spans dropped: %.0f (queue full), %.0f (export failed), %.0f (trace limit)",
			counted, total, value(t, text, `adstap_spans_dropped_total{reason="queue_full"}`), value(t, text, `adstap_spans_dropped_total{reason="export_failed"}`),
			value(t, text, `adstap_spans_dropped_total{reason="trace_limit"}`))
	}

	// The looping version's trace, as the UI reads it and as api_v3 does.
	for _, path := range []string{"/api/traces/" + traceOf, "/api/v3/traces/" + traceOf} {
		began := time.Now()
		size := httpGetSize(t, "http://"+j.QueryHTTP+path)
		t.Logf("FIGURE nack-loop-trace-read: GET %s: %d bytes in %s", path, size, time.Since(began).Round(time.Millisecond))
		if size > 4<<20 {
			t.Errorf("GET %s: %d bytes, want at most 4 MiB", path, size)
		}
	}
	tr := j.Trace(t, traceOf)
	var own, episodes int
	for _, s := range tr.Spans {
		if _, ok := s.Tag("xds.folded.count"); ok {
			episodes++
			var tags []string
			for _, kv := range s.Tags {
				tags = append(tags, fmt.Sprintf("%s=%v", kv.Key, kv.Value))
			}
			t.Logf("FIGURE nack-loop-episode-span: %s %s", s.OperationName, strings.Join(tags, "  "))
			n, _ := s.Tag("xds.folded.nacks")
			msg, _ := s.Tag("xds.error.message")
			if n.(int64) < 1 || !strings.Contains(fmt.Sprint(msg), "MAGLEV") {
				t.Errorf("episode span %s: xds.folded.nacks %v, xds.error.message %q", s.OperationName, n, msg)
			}
			continue
		}
		if r, _ := s.Tag("xds.result"); r == "nack" {
			own++
			if own == 1 {
				msg, _ := s.Tag("xds.error.message")
				obj, _ := s.Tag("xds.error.istio_config")
				if !strings.Contains(fmt.Sprint(msg), "MAGLEV") || !strings.Contains(fmt.Sprint(obj), "destination-rule/greeter-maglev") {
					t.Errorf("the first NACK's span: message %q, istio config %v; want grpc-go's message and the DestinationRule", msg, obj)
				}
			}
		}
	}
	t.Logf("FIGURE nack-loop-trace-spans: %d spans in the looping version's trace (%d NACK spans, %d episode spans) for %.0f NACKs", len(tr.Spans), own, episodes, total)
	if len(tr.Spans) > 1000 || episodes < 1 || own < 1 {
		t.Errorf("the looping version's trace has %d spans, %d NACK spans, %d episodes; want at most 1,000, with the first NACK and an episode", len(tr.Spans), own, episodes)
	}
	if v := value(t, scrape(t, admin), `adstap_spans_folded_total{type="cds"}`); v < total-float64(own)-10 {
		t.Errorf("adstap_spans_folded_total{type=\"cds\"} = %v for %v NACKs, %d spans of their own", v, total, own)
	}

	// rollout names the NACK, with its count, from either URL.
	var outs []string
	for _, jaeger := range []string{"http://" + j.QueryHTTP, j.QueryGRPC} {
		var out, errOut bytes.Buffer
		began := time.Now()
		code := runCLI(context.Background(), []string{"rollout", "--jaeger=" + jaeger, "--service=" + service, version}, &out, &errOut)
		t.Logf("FIGURE nack-loop-rollout: adstap rollout --jaeger=%s answered in %s (exit %d):\n%s%s", jaeger, time.Since(began).Round(time.Millisecond), code, out.String(), errOut.String())
		want := regexp.MustCompile(`(?m)^  greeter-client\.shop +NACKED +cds nacked ×` + fmt.Sprint(total) + `;? .*MAGLEV.*destination-rule/shop/greeter-maglev`)
		if code != exitOutOfSync || !want.MatchString(out.String()) {
			t.Errorf("rollout --jaeger=%s: exit %d, want %d and a line matching %s", jaeger, code, exitOutOfSync, want)
		}
		outs = append(outs, regexp.MustCompile(`, [0-9.]+[a-zµ]+ ago`).ReplaceAllString(out.String(), ""))
	}
	if outs[0] != outs[1] {
		t.Errorf("rollout over HTTP and over gRPC differ:\n%s\n---\n%s", outs[0], outs[1])
	}
}

// httpGetSize reads url and returns the size of its body.
func httpGetSize(t *testing.T, url string) int64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return n
}
