package refgraph_test

import (
	"fmt"
	"testing"
	"time"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/heapbench"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/refgraph"
)

// meshConfig is a sidecar's configuration in a large mesh, as the pushes of
// one full sync: clustersN Istio-shaped EDS clusters of 1 KB
// (xdsconfig.Clusters, as W1 of make bench) and their assignments, and routesN routes in 20 route configurations,
// each splitting its traffic 80/20 between two of the clusters and stamped
// with its VirtualService, behind 20 listeners.
type meshConfig struct {
	pushes []*codec.Response
	bytes  int // of the four pushes, as sent
}

func newMeshConfig(b *testing.B, clustersN, routesN int) meshConfig {
	b.Helper()
	const configs = 20
	var clusters, endpoints, routes, listeners []proto.Message
	for i, c := range xdsconfig.Clusters(clustersN, 1000) {
		clusters = append(clusters, c)
		name := c.(interface{ GetName() string }).GetName()
		endpoints = append(endpoints, xdsconfig.Endpoint(name, fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), 8080))
	}
	name := func(i int) string { return clusters[i%clustersN].(interface{ GetName() string }).GetName() }
	for c := range configs {
		rc := &route.RouteConfiguration{Name: fmt.Sprintf("%d", 8000+c)}
		for r := c; r < routesN; r += configs {
			vs := fmt.Sprintf("svc-%05d", r)
			rt := split("split", "/apis/networking.istio.io/v1/namespaces/ns-1/virtual-service/"+vs, name(2*r), 80, name(2*r+1), 20)
			rt.Match = &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
			rc.VirtualHosts = append(rc.VirtualHosts, &route.VirtualHost{Name: vs + ":8080", Domains: []string{vs, vs + ".ns-1.svc.cluster.local"}, Routes: []*route.Route{rt}})
		}
		routes = append(routes, rc)
		listeners = append(listeners, xdsconfig.Listener(fmt.Sprintf("0.0.0.0_%d", 8000+c), rc.Name))
	}
	var m meshConfig
	for i, p := range []struct {
		typeURL string
		res     []proto.Message
	}{{codec.TypeCluster, clusters}, {codec.TypeEndpoint, endpoints}, {codec.TypeListener, listeners}, {codec.TypeRoute, routes}} {
		resp := &discovery.DiscoveryResponse{TypeUrl: p.typeURL, VersionInfo: "1", Nonce: fmt.Sprint(i)}
		for _, r := range p.res {
			a, err := anypb.New(r)
			if err != nil {
				b.Fatal(err)
			}
			resp.Resources = append(resp.Resources, a)
		}
		raw, err := proto.Marshal(resp)
		if err != nil {
			b.Fatal(err)
		}
		m.bytes += len(raw)
		var decoded codec.Response
		if err := decoded.Decode(raw, false); err != nil {
			b.Fatal(err)
		}
		m.pushes = append(m.pushes, &decoded)
	}
	return m
}

// sync applies the configuration's pushes to g, each accepted.
func (m meshConfig) sync(g *refgraph.Graph) {
	for _, p := range m.pushes {
		g.Accepted(push(p.TypeURL, resourcesOf(p), nil, replaces(false, p.TypeURL)), start, 1)
	}
}

// BenchmarkGraphHeap measures what a stream's reference graph holds for a
// 10,000-cluster, 2,000-route configuration, against the bytes of the
// pushes it was built from: the first stream, and one more stream of a
// sidecar with the same configuration, whose names the first's share.
func BenchmarkGraphHeap(b *testing.B) {
	m := newMeshConfig(b, 10_000, 2_000)
	check := func(g *refgraph.Graph) {
		if n := g.Reported(); n != 0 {
			b.Fatalf("a consistent configuration has %d dangling references: %v", n, g.Findings())
		}
	}
	measure := func(b *testing.B) {
		var grown int64
		for b.Loop() {
			grown = heapbench.Grown(b, func() *refgraph.Graph {
				g := refgraph.New(false, time.Second)
				m.sync(g)
				return g
			}, check)
		}
		b.ReportMetric(float64(grown), "graph-B")
		b.ReportMetric(float64(m.bytes), "push-B")
		b.ReportMetric(float64(grown)/float64(m.bytes)*100, "%-of-push")
	}
	b.Run("first-stream", measure)
	b.Run("another-stream", func(b *testing.B) {
		first := refgraph.New(false, time.Second)
		m.sync(first)
		measure(b)
		check(first)
	})
}

// BenchmarkGraphEDSPush is the work of one endpoint change on that
// configuration: a push of one assignment, accepted and checked.
func BenchmarkGraphEDSPush(b *testing.B) {
	m := newMeshConfig(b, 10_000, 2_000)
	g := refgraph.New(false, time.Second)
	m.sync(g)
	one := resourcesOf(m.pushes[1])[:1]
	for b.Loop() {
		if c := g.Accepted(push(m.pushes[1].TypeURL, one, nil, false), start, 2); len(c) != 0 {
			b.Fatalf("an unchanged assignment changed %v", c)
		}
	}
}

// BenchmarkGraphCDSChange is the check of a config change on that
// configuration as the tracker hands it over (partial): 200 of the
// 10,000 clusters changed, the rest carried as they were. It costs what
// the push changed, not what it carried.
func BenchmarkGraphCDSChange(b *testing.B) {
	m := newMeshConfig(b, 10_000, 2_000)
	var changed []refgraph.Resource
	for i, r := range m.pushes[0].Resources {
		if i%50 == 0 {
			changed = append(changed, refgraph.Resource{Name: string(r.Name), Body: r.Body, Hash: r.Hash})
		}
	}
	// synced: the whole configuration, endpoints included. cds-only: the
	// clusters alone, as W1's client asks for them, so that each changed
	// cluster is checked again while it waits for its endpoints.
	for _, bc := range []struct {
		name   string
		pushes []*codec.Response
	}{{"synced", m.pushes}, {"cds-only", m.pushes[:1]}} {
		b.Run(bc.name, func(b *testing.B) {
			g := refgraph.New(false, time.Hour)
			for _, p := range bc.pushes {
				g.Accepted(push(p.TypeURL, resourcesOf(p), nil, replaces(false, p.TypeURL)), start, 1)
			}
			b.ReportAllocs()
			for b.Loop() {
				if c := g.Accepted(push(codec.TypeCluster, changed, nil, false), start, 2); len(c) != 0 {
					b.Fatalf("unchanged clusters changed %v", c)
				}
			}
		})
	}
}

// BenchmarkGraphFirstCDS is a stream's first CDS push of 10,000 clusters,
// scanned and checked into an empty graph (with the endpoints' waits it
// opens).
func BenchmarkGraphFirstCDS(b *testing.B) {
	m := newMeshConfig(b, 10_000, 2_000)
	var all []refgraph.Resource
	for _, r := range m.pushes[0].Resources {
		all = append(all, refgraph.Resource{Name: string(r.Name), Body: r.Body, Hash: r.Hash})
	}
	for b.Loop() {
		g := refgraph.New(false, time.Second)
		g.Accepted(push(codec.TypeCluster, all, nil, false), start, 1)
	}
}
