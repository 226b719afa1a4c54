package mesh_test

import (
	"context"
	"fmt"
	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"regexp"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promtest"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// TestStatusPrometheusWithJaeger: three sidecar taps (`adstap run`), each
// with a raw ADS client that answers its one push once, two of them with a
// NACK of a cluster the DestinationRule shop/reviews-maglev shaped; a real
// Prometheus scrapes them, a real Jaeger holds their spans. `status
// --prometheus --jaeger` gives each ERROR its proxy's message and the
// DestinationRule, read from the span its exemplar points to. (The clients
// answer once: a NACK loop, as grpc-go's xDS client and go-control-plane
// make one, grows the round's trace without end, and Jaeger's memory
// storage hands out a trace while it appends to it.)
func TestStatusPrometheusWithJaeger(t *testing.T) {
	leakcheck.Check(t)
	bin := adstapbin.Build(t)
	promtest.Binary(t) // skipped without Prometheus before anything starts
	jaeger := jaegertest.Start(t)

	const version = "2026-12-01T11:07:12Z/8"
	const rule = "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews-maglev"
	clusters := xdsconfig.Clusters(2, 0)
	maglev := clusters[1].(*clusterv3.Cluster)
	maglev.LbPolicy = clusterv3.Cluster_MAGLEV
	maglev.Metadata.FilterMetadata["istio"].Fields["config"] = structpb.NewStringValue(rule)
	snapshot := map[resource.Type][]types.Resource{resource.ClusterType: clusters}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel) // the streams stay open: the tap sees every answer
	nacks := map[string]string{
		"reviews-1": "Error adding/updating cluster(s) " + maglev.Name + ": unknown lb_policy MAGLEV (proxy 1)",
		"reviews-2": "Error adding/updating cluster(s) " + maglev.Name + ": unknown lb_policy MAGLEV (proxy 2)",
	}
	var targets []promtest.Target
	for i := range 3 {
		pod := fmt.Sprintf("reviews-%d", i)
		node := fmt.Sprintf("sidecar~10.0.1.%d~%s.shop~shop.svc.cluster.local", i+1, pod)
		cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
		cp.SetSnapshot(t, node, version, snapshot)
		tp := startTap(t, bin, cp.Addr(), "--otlp-endpoint=http://"+jaeger.OTLPGRPC)
		s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, tp.listen))
		if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
		answer := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}
		if msg := nacks[pod]; msg != "" {
			answer.VersionInfo, answer.ErrorDetail = "", &rpcstatus.Status{Code: 3, Message: msg}
		}
		if err := s.Send(answer); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, promtest.Target{Addr: tp.metrics, Labels: map[string]string{"pod": pod, "namespace": "shop"}})
	}
	server := promtest.Start(t, time.Second, targets...)

	var code int
	var out, stderr string
	lines := func(pod string) []*regexp.Regexp {
		return []*regexp.Regexp{
			regexp.MustCompile(`(?m)^  ` + pod + `\.shop cds: NACKED \d+m?s ago; trace [0-9a-f]{32}: ` + regexp.QuoteMeta(nacks[pod]) + `$`),
			regexp.MustCompile(`(?m)^  ` + pod + `\.shop cds: .*\n    from DestinationRule shop/reviews-maglev\n      kubectl get destinationrule -n shop reviews-maglev$`),
		}
	}
	xdstest.EventuallyWithin(t, 90*time.Second, "status --prometheus --jaeger names both NACKs' messages and the DestinationRule", func() bool {
		code, out, stderr = status(t, bin, "--prometheus", server.URL, "--jaeger", jaeger.QueryGRPC)
		for pod := range nacks {
			for _, re := range lines(pod) {
				if !re.MatchString(out) {
					return false
				}
			}
		}
		return true
	})
	t.Logf("adstap status --prometheus %s --jaeger %s (exit %d):\n%s", server.URL, jaeger.QueryGRPC, code, out)
	if code != 3 || stderr != "" {
		t.Errorf("exit %d, want 3 (two proxies in ERROR); stderr %q", code, stderr)
	}

	// A Jaeger that cannot be read costs the messages only, said once.
	code, out, stderr = status(t, bin, "--prometheus", server.URL, "--jaeger", "127.0.0.1:1")
	if code != 3 || !regexp.MustCompile(`^adstap status: --jaeger: Jaeger at 127\.0\.0\.1:1 cannot be reached .*; the NACKs' messages are not shown\n$`).MatchString(stderr) ||
		!regexp.MustCompile(`(?m)^  reviews-1\.shop cds: NACKED`).MatchString(out) {
		t.Errorf("--jaeger unreachable: exit %d, stderr %q, stdout:\n%s", code, stderr, out)
	}
	// --jaeger without --prometheus is a mistake of usage.
	if code, _, stderr := status(t, bin, "--jaeger", jaeger.QueryGRPC); code != 2 || stderr != "adstap status: --jaeger needs --prometheus (see adstap status --help)\n" {
		t.Errorf("--jaeger alone: exit %d, stderr %q", code, stderr)
	}
}
