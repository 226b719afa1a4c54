package istio_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"istio.io/istio/istioctl/pkg/clioptions"
	"istio.io/istio/istioctl/pkg/multixds"
	"istio.io/istio/istioctl/pkg/writer/pilot"
	pilotxds "istio.io/istio/pilot/pkg/xds"
	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pilot/test/xdstest"
	"istio.io/istio/pkg/adsc"
	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/export/csds"
	atxdstest "github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/istio/internal/mesh"
	"github.com/adstap/adstap/track"
)

// ghost is a cluster istiod does not know until its ServiceEntry exists.
const ghost = "outbound|9080||ghost.default.svc.cluster.local"

// deltaWatching is mesh.Delta's client also asking, from its first
// request, for the endpoints of name: as Envoy does for an EDS cluster it
// was given before istiod can answer for it.
func deltaWatching(t *testing.T, addr, workload, ip, name string) *adsc.Client {
	t.Helper()
	c := adsc.NewDelta(addr, &adsc.DeltaADSConfig{Config: adsc.Config{Namespace: mesh.Namespace, Workload: workload, IP: ip,
		Meta: &structpb.Struct{Fields: map[string]*structpb.Value{
			"NAMESPACE": structpb.NewStringValue(mesh.Namespace), "CLUSTER_ID": structpb.NewStringValue(mesh.ClusterID)}}}},
		adsc.Register(func(ctx adsc.HandlerContext, _, _ string, c *cluster.Cluster, ev adsc.Event) {
			if ev == adsc.EventDelete || c == nil {
				return
			}
			ctx.RegisterDependency(v3.EndpointType, xdstest.ExtractEdsClusterNames([]*cluster.Cluster{c})...)
		}),
		adsc.Watch[*cluster.Cluster]("*"),
		adsc.Register(func(ctx adsc.HandlerContext, _, _ string, l *listener.Listener, ev adsc.Event) {
			if ev == adsc.EventDelete || l == nil {
				return
			}
			ctx.RegisterDependency(v3.RouteType, xdstest.ExtractRoutesFromListeners([]*listener.Listener{l})...)
		}),
		adsc.Watch[*listener.Listener]("*"),
		adsc.Register(func(adsc.HandlerContext, string, string, *endpoint.ClusterLoadAssignment, adsc.Event) {}),
		adsc.Watch[*endpoint.ClusterLoadAssignment](name),
		adsc.Register(func(adsc.HandlerContext, string, string, *route.RouteConfiguration, adsc.Event) {}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		c.Close()
		<-done
	})
	return c
}

// resourceOf reads one resource of a node from the tap's /debug/resources.
func resourceOf(t *testing.T, tp *mesh.Tap, node, typ, name string) (track.ResourceStatus, bool) {
	t.Helper()
	var page csds.ResourcesPage
	body, err := tp.Page("/debug/resources?node=" + url.QueryEscape(node) + "&type=" + typ)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Streams {
		for _, r := range s.Resources {
			if r.Name == name {
				return r, true
			}
		}
	}
	return track.ResourceStatus{}, false
}

// TestNeverSentOnIstiodsEngine: istiod's engine, behind a tap, withholds
// the endpoints of an EDS cluster it sends (a fault: an update that never
// comes); the Delta client asked for them, so past the initial fetch timeout
// the tap names them never sent (DOES_NOT_EXIST, the live log,
// adstap_resources_not_sent), and clears it once the engine sends them.
func TestNeverSentOnIstiodsEngine(t *testing.T) {
	leak.Check(t)
	var withholding atomic.Bool
	withholding.Store(true)
	e := mesh.StartEngine(t, mesh.EngineOptions{
		ConfigString: serviceEntryHead("ghost", 9080) + "  endpoints:\n  - {address: 10.1.0.9}\n",
		Withhold: func(typeURL, name string) bool {
			return typeURL == v3.EndpointType && name == ghost && withholding.Load()
		},
	})
	tp := mesh.StartTap(t, mesh.TapOptions{Upstream: e.Addr, CSDS: true, Detect: track.Config{InitialFetchTimeout: time.Second}})
	node := mesh.NodeID("productpage", "10.0.0.1")
	deltaWatching(t, tp.Addr, "productpage", "10.0.0.1", ghost)

	atxdstest.EventuallyWithin(t, 20*time.Second, "the ghost's endpoints DOES_NOT_EXIST, never sent", func() bool {
		r, ok := resourceOf(t, tp, node, "eds", ghost)
		return ok && r.Status == track.ClientDoesNotExist && r.NotSent
	})
	if !atxdstest.Until(5*time.Second, func() bool {
		// istiod's Delta answer leaves the withheld name in removed_resources:
		// removed while still asked for, DOES_NOT_EXIST at once.
		return strings.Contains(tp.Log.String(), "EDS "+ghost+" on stream") && strings.Contains(tp.Log.String(), "the proxy does not have it")
	}) {
		t.Fatalf("no live log line for the ghost's endpoints:\n%s", tp.Log.String())
	}
	if got := tp.Metric("adstap_resources_not_sent", map[string]string{"type": "eds"}); got != 1 {
		t.Errorf("adstap_resources_not_sent{type=eds} = %v, want 1", got)
	}

	withholding.Store(false)
	e.Apply(t, serviceEntryHead("ghost", 9080)+"  endpoints:\n  - {address: 10.1.0.10}\n")
	atxdstest.EventuallyWithin(t, 20*time.Second, "the ghost's endpoints ACKED", func() bool {
		r, ok := resourceOf(t, tp, node, "eds", ghost)
		return ok && r.Status == track.ClientACKed && !r.NotSent
	})
	if got := tp.Metric("adstap_resources_not_sent", map[string]string{"type": "eds"}); got != 0 {
		t.Errorf("adstap_resources_not_sent{type=eds} = %v after the endpoints came, want 0", got)
	}
}

// TestProxyStatusThroughTheTap: istioctl proxy-status's own code
// (multixds and its status writer), pointed at the tap's CSDS listener with
// --xds-address and --plaintext, lists the proxies behind the tap.
func TestProxyStatusThroughTheTap(t *testing.T) {
	leak.Check(t)
	e := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: reviewsEntry})
	tp := mesh.StartTap(t, mesh.TapOptions{Upstream: e.Addr, CSDS: true})
	mesh.Delta(t, tp.Addr, "productpage", "10.0.0.1", nil)
	mesh.Delta(t, tp.Addr, "reviews", "10.0.0.2", nil)
	atxdstest.EventuallyWithin(t, 20*time.Second, "both proxies synced through the tap", func() bool {
		page, err := tp.Streams()
		if err != nil {
			return false
		}
		synced := 0
		for _, s := range page.Streams {
			if ts := s.Types[v3.ClusterType]; ts != nil && ts.State == track.StateSynced {
				synced++
			}
		}
		return synced == 2
	})

	responses, err := multixds.AllRequestAndProcessXds(&discovery.DiscoveryRequest{TypeUrl: pilotxds.TypeDebugSyncronization},
		clioptions.CentralControlPlaneOptions{Xds: tp.Running.CSDSAddr(), Plaintext: true, Timeout: 10 * time.Second},
		"istio-system", "", "", nil, multixds.Options{})
	if err != nil {
		t.Fatalf("istioctl's request: %v", err)
	}
	var out bytes.Buffer
	if err := (&pilot.XdsStatusWriter{Writer: &out, OutputFormat: "table"}).PrintAll(responses); err != nil {
		t.Fatalf("istioctl's writer: %v", err)
	}
	t.Logf("istioctl proxy-status --xds-address %s --plaintext:\n%s", tp.Running.CSDSAddr(), out.String())
	for _, proxy := range []string{mesh.NodeID("productpage", "10.0.0.1"), mesh.NodeID("reviews", "10.0.0.2")} {
		if !strings.Contains(out.String(), proxy) {
			t.Errorf("proxy-status does not list %s:\n%s", proxy, out.String())
		}
	}
	if !strings.Contains(out.String(), "adstap") {
		t.Errorf("proxy-status's ISTIOD column does not name the tap's identifier:\n%s", out.String())
	}
	// -v 1: each type's status, as istiod's syncz gives it.
	out.Reset()
	if err := (&pilot.XdsStatusWriter{Writer: &out, OutputFormat: "table", Verbosity: 1}).PrintAll(responses); err != nil {
		t.Fatalf("istioctl's writer: %v", err)
	}
	t.Logf("-v 1:\n%s", out.String())
	if strings.Count(out.String(), "SYNCED") < 2 {
		t.Errorf("proxy-status -v 1 does not show both proxies SYNCED:\n%s", out.String())
	}
}
