package main

import (
	"net"
	"strconv"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// splitGreeter is ResolverResources("greeter") with its route sending 10%
// to the cluster canary, which the snapshot has only withCanary; the route
// is stamped as istiod stamps a VirtualService's.
func splitGreeter(t *testing.T, backend string, withCanary bool) map[resource.Type][]types.Resource {
	t.Helper()
	res := xdsconfig.ResolverResources("greeter", backend)
	_, _, stable := xdsconfig.ResolverNames("greeter")
	r := res[resource.RouteType][0].(*routev3.RouteConfiguration).VirtualHosts[0].Routes[0]
	r.Name = "greeter-split"
	r.Metadata = xdsconfig.IstioConfig("virtual-service", "demo", "greeter-split")
	r.Action = &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
		WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{
			{Name: stable, Weight: wrapperspb.UInt32(90)}, {Name: "canary", Weight: wrapperspb.UInt32(10)},
		}}}}}
	if withCanary {
		host, portText, err := net.SplitHostPort(backend)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(portText)
		res[resource.ClusterType] = append(res[resource.ClusterType], xdsconfig.Cluster("canary", true))
		res[resource.EndpointType] = append(res[resource.EndpointType], xdsconfig.Endpoint("canary", host, uint32(port)))
	}
	return res
}

// TestRouteToAMissingClusterThroughGRPCGo: go-control-plane serves grpc-go's
// xDS client a route that sends 10% to a cluster its snapshot lacks (an
// inconsistent snapshot). Every type is SYNCED, yet adstap reports the
// dangling reference — live log, /debug/streams, adstap status (exit 3),
// metrics — with its share and VirtualService, and clears it once the
// snapshot is fixed.
func TestRouteToAMissingClusterThroughGRPCGo(t *testing.T) {
	leakcheck.Check(t)
	backend := xdstest.StartBackend(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	const node = "proxyless~10.0.0.3~greeter-client-7d9f.demo~demo.svc.cluster.local"
	var log syncbuf.Buffer
	// grpc-go asks for clusters by name, after the routes that name them:
	// a route's cluster is missing only once it has had time to come.
	tapAddr, admin := startTracedTap(t, cp.Addr(), &log, "--references-grace=300ms")

	cp.SetSnapshot(t, node, "1", xdsconfig.ResolverResources("greeter", backend))
	cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tapAddr, node)))
	cc.Connect()
	defer cc.Close()
	xdstest.Eventually(t, "grpc-go synced", func() bool {
		return strings.Contains(log.String(), "full sync complete")
	})
	if d := getStreams(t, admin, "").Dangling; len(d) != 0 {
		t.Fatalf("a consistent snapshot has dangling references: %+v", d)
	}

	cp.SetSnapshot(t, node, "2", splitGreeter(t, backend, false))
	xdstest.Eventually(t, "the dangling route on /debug/streams", func() bool { return len(getStreams(t, admin, "").Dangling) == 1 })
	d := getStreams(t, admin, "").Dangling[0]
	if d.Kind != "route_cluster" || d.Target != "canary" || d.Share != 0.1 || d.Route != "greeter-split" || d.NodeID != node ||
		d.IstioConfig == nil || d.IstioConfig.Kubectl != "kubectl get virtualservice -n demo greeter-split" {
		t.Errorf("dangling_references[0] = %+v, want the route to canary, 10%%, VirtualService demo/greeter-split", d)
	}
	for _, want := range []string{"dangling reference on stream ", "sends 10% of its traffic to cluster canary, which the proxy does not have", "— from VirtualService demo/greeter-split", "node=" + node} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the live log lacks %q:\n%s", want, log.String())
		}
	}
	if v := value(t, scrape(t, admin), `adstap_dangling_references{kind="route_cluster"}`); v != 1 {
		t.Errorf(`adstap_dangling_references{kind="route_cluster"} = %v, want 1`, v)
	}
	code, out, _ := cli(t, "status", "--admin", admin)
	if code != exitOutOfSync || !strings.Contains(out, "dangling reference for ") || !strings.Contains(out, "kubectl get virtualservice -n demo greeter-split") {
		t.Errorf("adstap status: exit %d, want %d with the dangling reference and its kubectl:\n%s", code, exitOutOfSync, out)
	}

	cp.SetSnapshot(t, node, "3", splitGreeter(t, backend, true))
	xdstest.Eventually(t, "the reference resolved", func() bool { return len(getStreams(t, admin, "").Dangling) == 0 })
	if !strings.Contains(log.String(), "dangling reference resolved on stream ") || !strings.Contains(log.String(), "-> cluster canary: the target arrived") {
		t.Errorf("the live log has no resolved line:\n%s", log.String())
	}
	if v := value(t, scrape(t, admin), `adstap_dangling_references{kind="route_cluster"}`); v != 0 {
		t.Errorf(`adstap_dangling_references{kind="route_cluster"} = %v after the fix, want 0`, v)
	}
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "dangling reference") {
			t.Logf("live log: %s", l)
		}
	}
	if code, out, _ := cli(t, "status", "--admin", admin); code != exitOK {
		t.Errorf("adstap status after the fix: exit %d, want 0:\n%s", code, out)
	}
}
