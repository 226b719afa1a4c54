package refgraph_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregate "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tls "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/refgraph"
)

// Istio's objects, as istiod stamps them.
const (
	splitVS  = "/apis/networking.istio.io/v1/namespaces/default/virtual-service/reviews-split"
	reviewDR = "/apis/networking.istio.io/v1/namespaces/default/destination-rule/reviews"
	v1       = "outbound|9080|v1|reviews.default.svc.cluster.local"
	v2       = "outbound|9080|v2|reviews.default.svc.cluster.local"
	vhost    = "reviews.default.svc.cluster.local:9080"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func stamp(path string) *core.Metadata {
	return &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": {Fields: map[string]*structpb.Value{"config": structpb.NewStringValue(path)}}}}
}

var ads = &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}}

// elsewhere is a config source that is not this stream (Istio's SDS: the
// agent's sds-grpc cluster).
var elsewhere = &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_ApiConfigSource{ApiConfigSource: &core.ApiConfigSource{
	ApiType: core.ApiConfigSource_GRPC, GrpcServices: []*core.GrpcService{{TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: "sds-grpc"}}}},
}}}

func edsCluster(name, config string) *clusterv3.Cluster {
	c := &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: name}}
	if config != "" {
		c.Metadata = stamp(config)
	}
	return c
}

func staticCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}}
}

func withSecret(t *testing.T, c *clusterv3.Cluster, secret string, from *core.ConfigSource) *clusterv3.Cluster {
	ctx := &tls.UpstreamTlsContext{CommonTlsContext: &tls.CommonTlsContext{
		TlsCertificateSdsSecretConfigs: []*tls.SdsSecretConfig{{Name: secret, SdsConfig: from}},
	}}
	c.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: mustAny(t, ctx)}}
	return c
}

func cla(name string, health ...core.HealthStatus) *endpoint.ClusterLoadAssignment {
	var lbs []*endpoint.LbEndpoint
	for _, h := range health {
		lbs = append(lbs, &endpoint.LbEndpoint{HealthStatus: h, HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{}}})
	}
	a := &endpoint.ClusterLoadAssignment{ClusterName: name}
	if len(lbs) > 0 {
		a.Endpoints = []*endpoint.LocalityLbEndpoints{{LbEndpoints: lbs}}
	}
	return a
}

func routeTo(name, cluster, config string) *route.Route {
	r := &route.Route{Name: name, Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_Cluster{Cluster: cluster}}}}
	if config != "" {
		r.Metadata = stamp(config)
	}
	return r
}

func split(name, config string, weights ...any) *route.Route {
	var cws []*route.WeightedCluster_ClusterWeight
	for i := 0; i < len(weights); i += 2 {
		cws = append(cws, &route.WeightedCluster_ClusterWeight{Name: weights[i].(string), Weight: wrapperspb.UInt32(uint32(weights[i+1].(int)))})
	}
	return &route.Route{Name: name, Metadata: stamp(config), Action: &route.Route_Route{Route: &route.RouteAction{
		ClusterSpecifier: &route.RouteAction_WeightedClusters{WeightedClusters: &route.WeightedCluster{Clusters: cws}}}}}
}

func routeConfig(name string, routes ...*route.Route) *route.RouteConfiguration {
	return &route.RouteConfiguration{Name: name, VirtualHosts: []*route.VirtualHost{{Name: vhost, Domains: []string{"*"}, Routes: routes}}}
}

func httpListener(t *testing.T, name string, manager *hcm.HttpConnectionManager) *listener.Listener {
	return &listener.Listener{Name: name, FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
		Name: "envoy.filters.network.http_connection_manager", ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(t, manager)}}}}}}
}

func rdsListener(t *testing.T, name, rc string) *listener.Listener {
	return httpListener(t, name, &hcm.HttpConnectionManager{RouteSpecifier: &hcm.HttpConnectionManager_Rds{Rds: &hcm.Rds{ConfigSource: ads, RouteConfigName: rc}}})
}

func inlineListener(t *testing.T, name string, rc *route.RouteConfiguration) *listener.Listener {
	return httpListener(t, name, &hcm.HttpConnectionManager{RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: rc}})
}

func tcpListener(t *testing.T, name, cluster string) *listener.Listener {
	p := &tcp.TcpProxy{StatPrefix: name, ClusterSpecifier: &tcp.TcpProxy_Cluster{Cluster: cluster}}
	return &listener.Listener{Name: name, FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
		Name: "envoy.filters.network.tcp_proxy", ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(t, p)}}}}}}
}

// step is one thing that happens to a stream.
type step struct {
	typeURL string
	res     []proto.Message
	removed []string // Delta
	nack    bool
	// request, when set, is a request instead of a push: SotW names or
	// Delta unsubscriptions.
	request []string
	tick    time.Duration // a tick this long after the stream's start, instead
	round   uint64
	at      time.Duration
}

func cds(round uint64, res ...proto.Message) step {
	return step{typeURL: codec.TypeCluster, res: res, round: round}
}
func eds(round uint64, res ...proto.Message) step {
	return step{typeURL: codec.TypeEndpoint, res: res, round: round}
}
func lds(round uint64, res ...proto.Message) step {
	return step{typeURL: codec.TypeListener, res: res, round: round}
}
func rds(round uint64, res ...proto.Message) step {
	return step{typeURL: codec.TypeRoute, res: res, round: round}
}

var start = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const grace = 15 * time.Second

// runAll is run, returning also every step's changes, in order.
func runAll(t *testing.T, delta bool, steps []step) (g *refgraph.Graph, last, all []refgraph.Change) {
	t.Helper()
	g = refgraph.New(delta, grace)
	for i, s := range steps {
		last = applyStep(t, g, delta, i, s)
		all = append(all, last...)
	}
	return g, last, all
}

// applyStep applies steps[i], s, to g.
func applyStep(t *testing.T, g *refgraph.Graph, delta bool, i int, s step) []refgraph.Change {
	t.Helper()
	at := start.Add(s.at)
	if s.at == 0 {
		at = start.Add(time.Duration(i) * time.Millisecond)
	}
	switch {
	case s.tick > 0:
		return g.Tick(start.Add(s.tick))
	case s.request != nil:
		req := &codec.Request{Delta: delta, TypeURL: s.typeURL}
		if delta {
			req.Unsubscribe = s.request
		} else {
			req.ResourceNames = s.request
		}
		return g.Requested(req, at, s.round)
	case s.nack:
		return nil // nothing accepted
	default:
		resp := response(t, delta, s.typeURL, "n", s.removed, s.res)
		return g.Accepted(push(s.typeURL, resourcesOf(resp), s.removed, replaces(delta, s.typeURL)), at, s.round)
	}
}

// TestGraphsSharingTheirNodesChangeAlone runs every case of TestGraph on
// two graphs in step, which share their nodes after every step (as a tick
// would), and on a third that stops halfway, sharing them with the other
// two then: each
// reports what the case alone reports, and the third holds the findings
// of the first half alone once the other two have gone on.
func TestGraphsSharingTheirNodesChangeAlone(t *testing.T) {
	leakcheck.Check(t)
	defer refgraph.ShareNodesFrom(1)()
	for _, tt := range graphCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			_, _, wantAll := runAll(t, tt.delta, tt.steps)
			half := len(tt.steps) / 2
			alone, _, _ := runAll(t, tt.delta, tt.steps[:half])
			a, b, c := refgraph.New(tt.delta, grace), refgraph.New(tt.delta, grace), refgraph.New(tt.delta, grace)
			var gotA, gotB []refgraph.Change
			for i, s := range tt.steps {
				gotA = append(gotA, applyStep(t, a, tt.delta, i, s)...)
				gotB = append(gotB, applyStep(t, b, tt.delta, i, s)...)
				if i < half {
					applyStep(t, c, tt.delta, i, s)
				}
				for _, g := range []*refgraph.Graph{a, b, c} {
					g.ShareNodes()
				}
			}
			for name, got := range map[string][]refgraph.Change{"a": gotA, "b": gotB} {
				if diff := cmp.Diff(briefs(wantAll), briefs(got)); diff != "" {
					t.Errorf("graph %s, every step's changes (-alone +shared):\n%s", name, diff)
				}
			}
			if diff := cmp.Diff(findingBriefs(alone.Findings()), findingBriefs(c.Findings())); diff != "" {
				t.Errorf("the graph stopped halfway, open findings (-alone +shared):\n%s", diff)
			}
		})
	}
}

// replaces is whether a push of typeURL replaces its type in these
// tests: each type is asked for by name, as Envoy asks for route
// configurations and assignments, so SotW listeners and clusters alone
// come whole.
func replaces(delta bool, typeURL string) bool {
	return codec.Replaces(delta, typeURL, false, true)
}

// resourcesOf are a decoded push's resources as the graph is handed them:
// all of them, with their bodies.
func resourcesOf(resp *codec.Response) []refgraph.Resource {
	var res []refgraph.Resource
	for _, r := range resp.Resources {
		res = append(res, refgraph.Resource{Name: string(r.Name), Body: r.Body, Hash: r.Hash})
	}
	return res
}

// response encodes a push as a control plane sends it and decodes its
// envelope as the tap does.
func response(t *testing.T, delta bool, typeURL, nonce string, removed []string, res []proto.Message) *codec.Response {
	t.Helper()
	var b []byte
	var err error
	if delta {
		m := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: nonce, RemovedResources: removed}
		for _, r := range res {
			m.Resources = append(m.Resources, &discovery.Resource{Name: nameOf(r), Version: "1", Resource: mustAny(t, r)})
		}
		b, err = proto.Marshal(m)
	} else {
		m := &discovery.DiscoveryResponse{TypeUrl: typeURL, Nonce: nonce, VersionInfo: "1"}
		for _, r := range res {
			m.Resources = append(m.Resources, mustAny(t, r))
		}
		b, err = proto.Marshal(m)
	}
	if err != nil {
		t.Fatal(err)
	}
	var resp codec.Response
	if err := resp.Decode(b, delta); err != nil {
		t.Fatal(err)
	}
	return &resp
}

func nameOf(m proto.Message) string {
	return m.ProtoReflect().Get(m.ProtoReflect().Descriptor().Fields().ByNumber(1)).String()
}

// brief is what the tests compare of a finding.
type brief struct {
	Kind                   refgraph.Kind
	Owner, Route, Target   string
	Share, Config          string
	Resolved, Present, MBB bool
	Window                 time.Duration
	Endpoints              int
}

func briefs(changes []refgraph.Change) []brief {
	var out []brief
	for _, c := range changes {
		b := brief{Kind: c.Kind, Owner: c.OwnerType + "/" + c.Owner, Route: c.Route, Target: c.Target, Share: c.ShareText(),
			Config: c.Config, Resolved: c.Resolved, Present: c.Present, MBB: c.MakeBeforeBreak, Endpoints: c.Endpoints}
		if c.MakeBeforeBreak {
			b.Window = c.Window
		}
		out = append(out, b)
	}
	return out
}

func findingBriefs(fs []refgraph.Finding) []brief {
	var cs []refgraph.Change
	for _, f := range fs {
		cs = append(cs, refgraph.Change{Finding: f})
	}
	return briefs(cs)
}

// graphCase is a stream's steps and what the graph makes of them.
type graphCase struct {
	name  string
	delta bool
	steps []step
	// want is what the last step started and ended; open what is
	// reported after it; all, when set, what every step did.
	want, open, all []brief
}

func TestGraph(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range graphCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			g, got, all := runAll(t, tt.delta, tt.steps)
			if tt.all != nil {
				if diff := cmp.Diff(tt.all, briefs(all)); diff != "" {
					t.Errorf("every step's changes (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tt.want, briefs(got)); diff != "" {
				t.Errorf("the last step's changes (-want +got):\n%s", diff)
			}
			if tt.open != nil {
				if diff := cmp.Diff(tt.open, findingBriefs(g.Findings())); diff != "" {
					t.Errorf("open findings (-want +got):\n%s", diff)
				}
			}
			if n := len(g.Findings()); n != g.Reported() {
				t.Errorf("Reported() = %d, Findings() has %d", g.Reported(), n)
			}
		})
	}
}

// TestGraphAcceptedAsTheTrackerHandsItOver: every case of TestGraph, each
// push handed over as the tracker does: kept compact (a resource the push
// carries byte for byte as last accepted comes without its body), or
// partial (only what it changed, and the names a replacing push dropped).
// Every step changes what the whole push changes, and the same findings
// stay open.
func TestGraphAcceptedAsTheTrackerHandsItOver(t *testing.T) {
	leakcheck.Check(t)
	// And resources carried unchanged whose references dangle.
	unchanged := []graphCase{{
		name: "an EDS cluster without endpoints, carried unchanged, still waits",
		steps: []step{
			cds(1, edsCluster(v1, reviewDR)), {tick: grace + time.Second},
			cds(2, edsCluster(v1, reviewDR), staticCluster("other")), {tick: 2*grace + time.Second},
		},
	}, {
		name: "a listener waiting for its route configuration, carried unchanged, still waits",
		steps: []step{
			rds(1, routeConfig("other")), lds(1, rdsListener(t, "l", "9080")), {tick: grace + time.Second},
			lds(2, rdsListener(t, "l", "9080"), tcpListener(t, "t", "x")), {tick: 2*grace + time.Second},
			rds(3, routeConfig("9080")),
		},
	}, {
		name:  "Delta: a route configuration carried unchanged still routes to nowhere, until the cluster comes",
		delta: true,
		steps: []step{
			cds(1, edsCluster(v1, reviewDR)), rds(2, routeConfig("9080", routeTo("r", v2, splitVS))),
			rds(3, routeConfig("9080", routeTo("r", v2, splitVS)), routeConfig("other")),
			cds(4, edsCluster(v2, reviewDR)),
		},
	}}
	for _, tt := range append(graphCases(t), unchanged...) {
		t.Run(tt.name, func(t *testing.T) {
			want, _, wantAll := runAll(t, tt.delta, tt.steps)
			// As the tracker hands pushes over: compact, then as what they
			// changed (partial), then through a second stream's
			// graph that finds every resource scanned by the first's.
			scans := refgraph.NewScans()
			for _, way := range []struct {
				name    string
				partial bool
				scans   *refgraph.Scans
			}{{"compact", false, nil}, {"partial", true, nil}, {"first stream", true, scans}, {"second stream", true, scans}} {
				got, gotAll := runAccepted(t, tt.delta, tt.steps, way.partial, way.scans)
				if diff := cmp.Diff(briefs(wantAll), briefs(gotAll)); diff != "" {
					t.Errorf("%s: every step's changes (-whole +as handed over):\n%s", way.name, diff)
				}
				if diff := cmp.Diff(findingBriefs(want.Findings()), findingBriefs(got.Findings())); diff != "" {
					t.Errorf("%s: open findings (-whole +as handed over):\n%s", way.name, diff)
				}
			}
			if hits, misses := scans.Stats(); hits < misses {
				t.Errorf("the second stream's graph found %d scans made by the first, which made %d", hits, misses)
			}
		})
	}
}

// runAccepted is runAll with each accepted push handed over compact, a
// resource unchanged since it was last accepted without its body; with
// partial, only what changed, and the names a push replacing its type
// dropped, replacing nothing itself. scans, when set, are shared.
func runAccepted(t *testing.T, delta bool, steps []step, partial bool, scans *refgraph.Scans) (*refgraph.Graph, []refgraph.Change) {
	t.Helper()
	g := refgraph.New(delta, grace)
	g.ShareScans(scans)
	accepted := map[string]map[string][]byte{} // by type, by name
	var all []refgraph.Change
	for i, s := range steps {
		at := start.Add(s.at)
		if s.at == 0 {
			at = start.Add(time.Duration(i) * time.Millisecond)
		}
		bodies := accepted[s.typeURL]
		if bodies == nil {
			bodies = map[string][]byte{}
			accepted[s.typeURL] = bodies
		}
		switch {
		case s.tick > 0:
			all = append(all, g.Tick(start.Add(s.tick))...)
		case s.request != nil:
			req := &codec.Request{Delta: delta, TypeURL: s.typeURL}
			if delta {
				req.Unsubscribe = s.request
				for _, n := range s.request {
					delete(bodies, n)
				}
			} else {
				req.ResourceNames = s.request
				for n := range bodies {
					if !slices.Contains(s.request, n) && len(s.request) > 0 {
						delete(bodies, n)
					}
				}
			}
			all = append(all, g.Requested(req, at, s.round)...)
		case s.nack:
		default:
			resp := response(t, delta, s.typeURL, "n", s.removed, s.res)
			var res []refgraph.Resource
			next := map[string][]byte{}
			for _, r := range resp.Resources {
				v := refgraph.Resource{Name: string(r.Name), Body: r.Body, Hash: r.Hash}
				if b, ok := bodies[v.Name]; ok && bytes.Equal(b, r.Body) {
					v.Body, v.Unchanged = nil, true
				}
				if !partial || !v.Unchanged {
					res = append(res, v)
				}
				next[v.Name] = bytes.Clone(r.Body)
			}
			removed := s.removed
			replace := replaces(delta, s.typeURL)
			if replace {
				if partial {
					for n := range bodies {
						if _, ok := next[n]; !ok {
							removed = append(removed, n)
						}
					}
				}
				clear(bodies)
			}
			for _, n := range s.removed {
				delete(bodies, n)
			}
			maps.Copy(bodies, next)
			if partial {
				all = append(all, g.Accepted(push(s.typeURL, res, removed, false), at, s.round)...)
			} else {
				all = append(all, g.Accepted(push(s.typeURL, res, s.removed, replace), at, s.round)...)
			}
		}
	}
	return g, all
}

func graphCases(t *testing.T) []graphCase {
	reviews := func() []proto.Message {
		return []proto.Message{edsCluster(v1, reviewDR)}
	}
	return []graphCase{{
		name: "a weighted route to a cluster never sent: its share and VirtualService",
		steps: []step{
			cds(1, reviews()...), eds(1, cla(v1, core.HealthStatus_HEALTHY)),
			rds(2, routeConfig("9080", split("reviews", splitVS, v1, 90, v2, 10))),
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "reviews", Target: v2, Share: "10%", Config: splitVS}},
		open: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "reviews", Target: v2, Share: "10%", Config: splitVS}},
	}, {
		name: "the cluster arrives in a later round: resolved",
		steps: []step{
			cds(1, reviews()...), eds(1, cla(v1, core.HealthStatus_HEALTHY)),
			rds(2, routeConfig("9080", split("reviews", splitVS, v1, 90, v2, 10))),
			cds(3, edsCluster(v1, reviewDR), edsCluster(v2, reviewDR)),
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "reviews", Target: v2, Share: "10%", Config: splitVS, Resolved: true, Present: true}},
	}, {
		name: "the cluster arrives in the same round: make-before-break broken, with the window",
		steps: []step{
			cds(1, reviews()...),
			{typeURL: codec.TypeRoute, res: []proto.Message{routeConfig("9080", routeTo("all", v2, splitVS))}, round: 2, at: time.Second},
			{typeURL: codec.TypeCluster, res: []proto.Message{edsCluster(v1, reviewDR), edsCluster(v2, reviewDR)}, round: 2, at: time.Second + 40*time.Millisecond},
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "all", Target: v2, Share: "all", Config: splitVS, Resolved: true, Present: true, MBB: true, Window: 40 * time.Millisecond}},
	}, {
		name: "the route is dropped: resolved, the reference gone",
		steps: []step{
			cds(1, reviews()...),
			rds(2, routeConfig("9080", split("reviews", splitVS, v1, 90, v2, 10))),
			rds(3, routeConfig("9080", routeTo("reviews", v1, splitVS))),
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "reviews", Target: v2, Share: "10%", Config: splitVS, Resolved: true}},
	}, {
		name: "references that need no cluster of the proxy's: Istio's own, cluster_header, redirects, direct responses, zero weights",
		steps: []step{
			cds(1, reviews()...),
			rds(2, routeConfig("80",
				routeTo("block", "BlackHoleCluster", ""), routeTo("pass", "PassthroughCluster", ""),
				routeTo("in", "InboundPassthroughClusterIpv4", ""),
				&route.Route{Name: "header", Action: &route.Route_Route{Route: &route.RouteAction{ClusterSpecifier: &route.RouteAction_ClusterHeader{ClusterHeader: "x-cluster"}}}},
				&route.Route{Name: "redirect", Action: &route.Route_Redirect{Redirect: &route.RedirectAction{HostRedirect: "example.com"}}},
				&route.Route{Name: "direct", Action: &route.Route_DirectResponse{DirectResponse: &route.DirectResponseAction{Status: 404}}},
				split("canary", splitVS, v1, 100, v2, 0))),
		},
	}, {
		name: "istiod's port-80 virtual hosts for VirtualServices whose host has no port 80",
		steps: []step{
			cds(1, reviews()...),
			rds(2, &route.RouteConfiguration{Name: "80", VirtualHosts: []*route.VirtualHost{{Name: "svc.default.svc.cluster.local:80",
				Routes: []*route.Route{split("r", splitVS, "outbound|80|v1|svc.default.svc.cluster.local", 80, "outbound|80|v2|svc.default.svc.cluster.local", 20)}}}}),
		},
	}, {
		name: "a subset missing on a port-80 service is flagged",
		steps: []step{
			cds(1, edsCluster("outbound|80||svc.default.svc.cluster.local", ""), edsCluster("outbound|80|v1|svc.default.svc.cluster.local", reviewDR)),
			rds(2, &route.RouteConfiguration{Name: "80", VirtualHosts: []*route.VirtualHost{{Name: "svc.default.svc.cluster.local:80",
				Routes: []*route.Route{split("r", splitVS, "outbound|80|v1|svc.default.svc.cluster.local", 80, "outbound|80|v2|svc.default.svc.cluster.local", 20)}}}}),
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/80", Route: "r", Target: "outbound|80|v2|svc.default.svc.cluster.local", Share: "20%", Config: splitVS}},
	}, {
		name: "a route configuration inline in a listener",
		steps: []step{
			cds(1, reviews()...),
			lds(2, inlineListener(t, "0.0.0.0_9080", routeConfig("inline", routeTo("r", v2, splitVS)))),
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "lds/0.0.0.0_9080", Route: "r", Target: v2, Share: "all", Config: splitVS}},
	}, {
		name: "no cluster accepted yet on the stream: routes are not checked",
		steps: []step{
			rds(1, routeConfig("9080", routeTo("r", v2, splitVS))),
		},
	}, {
		name: "a TCP proxy to a cluster not in CDS",
		steps: []step{
			cds(1, reviews()...),
			lds(2, tcpListener(t, "10.0.0.1_3306", "outbound|3306||mysql.default.svc.cluster.local")),
		},
		want: []brief{{Kind: refgraph.ListenerCluster, Owner: "lds/10.0.0.1_3306", Target: "outbound|3306||mysql.default.svc.cluster.local", Share: "all"}},
	}, {
		name: "a TCP proxy's weighted cluster not in CDS, with its share",
		steps: []step{
			cds(1, reviews()...),
			lds(2, &listener.Listener{Name: "0.0.0.0_3306", FilterChains: []*listener.FilterChain{{Filters: []*listener.Filter{{
				Name: "envoy.filters.network.tcp_proxy", ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(t, &tcp.TcpProxy{StatPrefix: "mysql",
					ClusterSpecifier: &tcp.TcpProxy_WeightedClusters{WeightedClusters: &tcp.TcpProxy_WeightedCluster{Clusters: []*tcp.TcpProxy_WeightedCluster_ClusterWeight{
						{Name: v1, Weight: 70}, {Name: "mysql-canary", Weight: 30}}}}})}}}}}}),
		},
		want: []brief{{Kind: refgraph.ListenerCluster, Owner: "lds/0.0.0.0_3306", Target: "mysql-canary", Share: "30%"}},
	}, {
		name:  "a listener waits for its route configuration: nothing within the grace",
		steps: []step{lds(1, rdsListener(t, "0.0.0.0_9080", "9080")), {tick: grace - time.Second}},
	}, {
		name:  "a listener's route configuration never came: reported past the grace",
		steps: []step{lds(1, rdsListener(t, "0.0.0.0_9080", "9080")), {tick: grace}},
		want:  []brief{{Kind: refgraph.ListenerRoute, Owner: "lds/0.0.0.0_9080", Target: "9080", Share: "all"}},
		open:  []brief{{Kind: refgraph.ListenerRoute, Owner: "lds/0.0.0.0_9080", Target: "9080", Share: "all"}},
	}, {
		name:  "the route configuration comes within the grace: never reported",
		steps: []step{lds(1, rdsListener(t, "0.0.0.0_9080", "9080")), rds(1, routeConfig("9080")), {tick: grace}},
	}, {
		name:  "an EDS cluster whose assignment never came",
		steps: []step{cds(1, reviews()...), {tick: grace}},
		want:  []brief{{Kind: refgraph.ClusterEndpoints, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR}},
	}, {
		name:  "an EDS cluster with no endpoint: 503 UH at once, with its DestinationRule",
		steps: []step{cds(1, reviews()...), eds(1, cla(v1))},
		want:  []brief{{Kind: refgraph.ClusterUnhealthy, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR}},
	}, {
		name:  "an EDS cluster whose endpoints are all unhealthy",
		steps: []step{cds(1, reviews()...), eds(1, cla(v1, core.HealthStatus_UNHEALTHY, core.HealthStatus_DRAINING))},
		want:  []brief{{Kind: refgraph.ClusterUnhealthy, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR, Endpoints: 2}},
	}, {
		name:  "a healthy endpoint arrives",
		steps: []step{cds(1, reviews()...), eds(1, cla(v1)), eds(2, cla(v1, core.HealthStatus_UNHEALTHY, core.HealthStatus_DEGRADED))},
		want:  []brief{{Kind: refgraph.ClusterUnhealthy, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR, Resolved: true, Present: true}},
	}, {
		name:  "Delta: an empty assignment unsubscribed and sent again is one finding",
		delta: true,
		steps: []step{
			cds(1, reviews()...), eds(1, cla(v1)),
			{typeURL: codec.TypeEndpoint, request: []string{v1}, round: 2},
			eds(2, cla(v1)),
			{tick: time.Hour},
		},
		all:  []brief{{Kind: refgraph.ClusterUnhealthy, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR}},
		open: []brief{{Kind: refgraph.ClusterUnhealthy, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR}},
	}, {
		name:  "a cluster waiting for its assignment gets an empty one: reported at once",
		steps: []step{cds(1, reviews()...), eds(1, cla(v1))},
		want:  []brief{{Kind: refgraph.ClusterUnhealthy, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR}},
	}, {
		name: "an assignment under the cluster's service_name",
		steps: []step{
			cds(1, &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
				EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: "svc"}}),
			eds(1, cla("c", core.HealthStatus_HEALTHY)),
			eds(2, cla("svc")),
		},
		want: []brief{{Kind: refgraph.ClusterUnhealthy, Owner: "cds/c", Target: "svc", Share: "all"}},
	}, {
		name: "clusters that need no endpoints from the stream: static, original destination, aggregate, EDS from elsewhere, Istio's own",
		steps: []step{cds(1,
			staticCluster("BlackHoleCluster"),
			&clusterv3.Cluster{Name: "PassthroughCluster", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}},
			&clusterv3.Cluster{Name: "agg", ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
				Name: "envoy.clusters.aggregate", TypedConfig: mustAny(t, &aggregate.ClusterConfig{Clusters: []string{"a", "b"}})}}},
			&clusterv3.Cluster{Name: "remote", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
				EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: elsewhere}},
		), {tick: grace}},
	}, {
		name:  "a secret to come over the stream never came",
		steps: []step{cds(1, withSecret(t, staticCluster("mtls"), "default", ads)), {tick: grace}},
		want:  []brief{{Kind: refgraph.Secret, Owner: "cds/mtls", Target: "default", Share: "all"}},
	}, {
		name:  "a secret from the agent's SDS (another stream) is not checked",
		steps: []step{cds(1, withSecret(t, staticCluster("mtls"), "default", elsewhere)), {tick: grace}},
	}, {
		name: "a NACKed push is not applied",
		steps: []step{
			cds(1, reviews()...),
			{typeURL: codec.TypeRoute, res: []proto.Message{routeConfig("9080", routeTo("r", v2, splitVS))}, nack: true, round: 2},
		},
	}, {
		name: "SotW: a cluster missing from a CDS push is removed; the route to it dangles",
		steps: []step{
			cds(1, edsCluster(v1, reviewDR), edsCluster(v2, reviewDR)),
			rds(1, routeConfig("9080", routeTo("r", v2, splitVS))),
			cds(2, edsCluster(v1, reviewDR)),
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "r", Target: v2, Share: "all", Config: splitVS}},
	}, {
		name:  "Delta: a cluster left out of a push stays",
		delta: true,
		steps: []step{
			cds(1, edsCluster(v1, reviewDR), edsCluster(v2, reviewDR)),
			rds(1, routeConfig("9080", routeTo("r", v2, splitVS))),
			cds(2, edsCluster(v1, reviewDR)),
		},
	}, {
		name:  "Delta: a removed cluster makes the route dangle",
		delta: true,
		steps: []step{
			cds(1, edsCluster(v1, reviewDR), edsCluster(v2, reviewDR)),
			rds(1, routeConfig("9080", routeTo("r", v2, splitVS))),
			{typeURL: codec.TypeCluster, removed: []string{v2}, round: 2},
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "r", Target: v2, Share: "all", Config: splitVS}},
	}, {
		name:  "Delta: a removed route configuration resolves its findings",
		delta: true,
		steps: []step{
			cds(1, edsCluster(v1, reviewDR)),
			rds(1, routeConfig("9080", routeTo("r", v2, splitVS))),
			{typeURL: codec.TypeRoute, removed: []string{"9080"}, round: 2},
		},
		want: []brief{{Kind: refgraph.RouteCluster, Owner: "rds/9080", Route: "r", Target: v2, Share: "all", Config: splitVS, Resolved: true}},
	}, {
		name:  "Delta: unsubscribing from an assignment leaves the cluster without endpoints",
		delta: true,
		steps: []step{
			cds(1, reviews()...), eds(1, cla(v1, core.HealthStatus_HEALTHY)),
			{typeURL: codec.TypeEndpoint, request: []string{v1}, round: 2, at: time.Second},
			{tick: time.Second + grace},
		},
		want: []brief{{Kind: refgraph.ClusterEndpoints, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR}},
	}, {
		name: "SotW: an EDS request without a name drops its assignment",
		steps: []step{
			cds(1, reviews()...), eds(1, cla(v1, core.HealthStatus_HEALTHY), cla("other", core.HealthStatus_HEALTHY)),
			{typeURL: codec.TypeEndpoint, request: []string{"other"}, round: 2, at: time.Second},
			{tick: time.Second + grace},
		},
		want: []brief{{Kind: refgraph.ClusterEndpoints, Owner: "cds/" + v1, Target: v1, Share: "all", Config: reviewDR}},
	}, {
		name: "clusters asked for by name (grpc-go): a route's cluster may come after the route, within the grace",
		steps: []step{
			{typeURL: codec.TypeCluster, request: []string{v1}},
			cds(1, reviews()...),
			rds(2, routeConfig("9080", routeTo("r", v2, splitVS))),
		},
	}}
}

// TestSummaries: the sentences the outputs show.
func TestSummaries(t *testing.T) {
	leakcheck.Check(t)
	f := refgraph.Finding{Kind: refgraph.RouteCluster, OwnerType: "rds", Owner: "9080", RouteConfig: "9080", VirtualHost: vhost, Route: "reviews", Target: v2, Weight: 10, TotalWeight: 100}
	want := "route reviews of virtual host " + vhost + " in route configuration 9080 sends 10% of its traffic to cluster " + v2 + ", which the proxy does not have: those requests fail with 503 NC"
	if got := f.Summary(); got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
	f.Weight, f.TotalWeight = 1, 3
	if got := f.ShareText(); got != "33.3%" {
		t.Errorf("ShareText() = %q, want 33.3%%", got)
	}
	for _, k := range refgraph.Kinds {
		if s := (refgraph.Finding{Kind: k, Owner: "o", Target: "t"}).Summary(); s == "" || s == string(k)+" o -> t" {
			t.Errorf("kind %s has no sentence: %q", k, s)
		}
	}
}

// A cluster's wait for its assignment keeps its start when it becomes a
// finding: past the grace (Tick), or at once when the assignment comes
// empty; the window of its end counts from the start.
func TestAWaitKeepsItsStart(t *testing.T) {
	leakcheck.Check(t)
	accept := func(g *refgraph.Graph, typeURL string, at time.Duration, res ...proto.Message) []refgraph.Change {
		t.Helper()
		return g.Accepted(push(typeURL, resourcesOf(response(t, false, typeURL, "n", nil, res)), nil, replaces(false, typeURL)), start.Add(at), 1)
	}
	only := func(what string, got []refgraph.Change, kind refgraph.Kind, resolved bool) refgraph.Change {
		t.Helper()
		if len(got) != 1 || got[0].Kind != kind || got[0].Resolved != resolved {
			t.Fatalf("%s: %+v, want one %s (resolved %v)", what, briefs(got), kind, resolved)
		}
		return got[0]
	}
	t.Run("past the grace", func(t *testing.T) {
		g := refgraph.New(false, grace)
		if got := accept(g, codec.TypeCluster, 0, edsCluster(v1, reviewDR)); len(got) != 0 {
			t.Fatalf("a wait was reported at once: %+v", briefs(got))
		}
		if got := g.Tick(start.Add(grace - time.Second)); len(got) != 0 {
			t.Fatalf("reported within the grace: %+v", briefs(got))
		}
		c := only("past the grace", g.Tick(start.Add(grace)), refgraph.ClusterEndpoints, false)
		if !c.Since.Equal(start) {
			t.Errorf("Since = %v, want the wait's start %v", c.Since, start)
		}
		if got := g.Tick(start.Add(2 * grace)); len(got) != 0 {
			t.Errorf("reported twice: %+v", briefs(got))
		}
		c = only("endpoints come", accept(g, codec.TypeEndpoint, grace+2*time.Second, cla(v1, core.HealthStatus_HEALTHY)), refgraph.ClusterEndpoints, true)
		if c.Window != grace+2*time.Second {
			t.Errorf("Window = %v, want %v", c.Window, grace+2*time.Second)
		}
		if n := g.Reported(); n != 0 {
			t.Errorf("%d findings reported after the end, want 0", n)
		}
	})
	t.Run("an empty assignment", func(t *testing.T) {
		g := refgraph.New(false, grace)
		accept(g, codec.TypeCluster, 0, edsCluster(v1, reviewDR))
		c := only("empty assignment", accept(g, codec.TypeEndpoint, 5*time.Second, cla(v1)), refgraph.ClusterUnhealthy, false)
		if !c.Since.Equal(start) {
			t.Errorf("Since = %v, want the wait's start %v", c.Since, start)
		}
		if got := g.Tick(start.Add(2 * grace)); len(got) != 0 {
			t.Errorf("the wait was reported too: %+v", briefs(got))
		}
		c = only("endpoints come", accept(g, codec.TypeEndpoint, 8*time.Second, cla(v1, core.HealthStatus_HEALTHY)), refgraph.ClusterUnhealthy, true)
		if c.Window != 8*time.Second {
			t.Errorf("Window = %v, want 8s", c.Window)
		}
	})
	t.Run("ended within the grace", func(t *testing.T) {
		g := refgraph.New(false, grace)
		accept(g, codec.TypeCluster, 0, edsCluster(v1, reviewDR))
		if got := accept(g, codec.TypeEndpoint, time.Second, cla(v1, core.HealthStatus_HEALTHY)); len(got) != 0 {
			t.Errorf("a wait that ended unreported said %+v", briefs(got))
		}
		if got := g.Tick(start.Add(2 * grace)); len(got) != 0 {
			t.Errorf("an ended wait was reported: %+v", briefs(got))
		}
	})
}

// Streams that share their scans find a resource's by its bytes only under
// its own name: the same bytes under another name (a Delta resource's
// name is its own, beside its body) are scanned as that name.
func TestSharedScansKeepEachName(t *testing.T) {
	leakcheck.Check(t)
	resp := response(t, false, codec.TypeCluster, "n", nil, []proto.Message{edsCluster(v1, reviewDR)})
	res := resourcesOf(resp)
	scans := refgraph.NewScans()
	graph := func() *refgraph.Graph {
		g := refgraph.New(false, grace)
		g.ShareScans(scans)
		return g
	}
	graph().Accepted(push(codec.TypeCluster, res, nil, true), start, 1)
	graph().Accepted(push(codec.TypeCluster, res, nil, true), start, 1)
	if hits, misses := scans.Stats(); hits != 1 || misses != 1 {
		t.Errorf("scans of the same bytes under the same name: %d hits, %d misses; want 1 and 1", hits, misses)
	}
	renamed := slices.Clone(res)
	renamed[0].Name = "renamed"
	g := graph()
	g.Accepted(push(codec.TypeCluster, renamed, nil, true), start, 1)
	if !g.Holds(codec.TypeCluster, "renamed") || g.Holds(codec.TypeCluster, v1) {
		t.Errorf("the graph holds renamed %v and %s %v; want only renamed", g.Holds(codec.TypeCluster, "renamed"), v1, g.Holds(codec.TypeCluster, v1))
	}
	if hits, misses := scans.Stats(); hits != 1 || misses != 2 {
		t.Errorf("scans: %d hits, %d misses; want the renamed one a miss: 1 and 2", hits, misses)
	}
}

// push is a Push of a list of resources.
func push(typeURL string, res []refgraph.Resource, removed []string, replace bool) refgraph.Push {
	return refgraph.Push{TypeURL: typeURL, Resources: refgraph.List(res), Removed: removed, Replace: replace}
}

// TestIdleGraphHoldsOnlyTheMapsItFilled syncs a sidecar's clusters and
// their assignments: its graph holds no map of routes, listeners, secrets,
// assignments under other names or findings, which it never filled (an
// idle stream held an empty one of each); a listener makes the map of
// listeners.
func TestIdleGraphHoldsOnlyTheMapsItFilled(t *testing.T) {
	leakcheck.Check(t)
	g, _, _ := runAll(t, false, []step{
		cds(1, edsCluster("outbound|80||a", "a"), edsCluster("outbound|80||b", "b")),
		eds(1, cla("outbound|80||a", core.HealthStatus_HEALTHY), cla("outbound|80||b", core.HealthStatus_HEALTHY)),
	})
	if got := g.Maps(); len(got) != 0 {
		t.Errorf("a graph of clusters and their assignments holds maps %v, want none", got)
	}
	applyStep(t, g, false, 2, lds(2, tcpListener(t, "0.0.0.0_80", "outbound|80||a")))
	if got, want := g.Maps(), []string{"listeners"}; !slices.Equal(got, want) {
		t.Errorf("after a listener, the graph holds maps %v, want %v", got, want)
	}
}

// Graphs sent the same pushes (a fleet of proxies syncing on a large first
// push, then a change sent to all of them at once) share their nodes as soon
// as they applied each, not at the next tick: the map each graph built or
// copied goes back for the next one to fill. They still change alone; a
// second change to one graph before the tick, or a change to a graph whose
// nodes no other shared (a lone sidecar), is looked up at the tick, so that
// a stream sent many pays at most two lookups a tick.
func TestGraphsSentTheSamePushesShareTheirNodesAtOnce(t *testing.T) {
	leakcheck.Check(t)
	var clusters, assignments []proto.Message
	for i := range refgraph.SmallPush + 1 {
		name := fmt.Sprintf("outbound|80||svc-%d", i)
		clusters = append(clusters, edsCluster(name, name))
		assignments = append(assignments, cla(name, core.HealthStatus_HEALTHY))
	}
	a, b := refgraph.New(false, grace), refgraph.New(false, grace)
	for i, s := range []step{cds(1, clusters...), eds(1, assignments...)} {
		applyStep(t, a, false, i, s)
		applyStep(t, b, false, i, s)
		if !a.SharesNodesWith(b) {
			t.Fatalf("after step %d (%d resources), the graphs do not share their nodes, want shared at once", i, refgraph.SmallPush+1)
		}
	}
	tick := func(gs ...*refgraph.Graph) {
		for _, g := range gs {
			g.Tick(start)
		}
	}
	tick(a, b)
	// One assignment changes (a push of one resource) for a alone: a
	// copies its nodes, and b's are as they were.
	unhealthy := func(i int) step {
		return eds(2, cla(fmt.Sprintf("outbound|80||svc-%d", i), core.HealthStatus_UNHEALTHY))
	}
	applyStep(t, a, false, 2, unhealthy(0))
	if a.SharesNodesWith(b) {
		t.Error("after a later push to one graph, it still shares its nodes with the other")
	}
	if got := b.Holds(codec.TypeEndpoint, "outbound|80||svc-0"); !got {
		t.Error("the other graph lost an assignment")
	}
	// The same push to b: shared at once.
	applyStep(t, b, false, 3, unhealthy(0))
	if !a.SharesNodesWith(b) {
		t.Error("after the same later push, the graphs do not share their nodes, want shared at once")
	}
	// A second change to b before the tick: b owns its nodes until the
	// tick, when a graph sent the same finds them.
	applyStep(t, b, false, 4, unhealthy(1))
	sharedAtTick(t, b, "a second change before the tick", cds(1, clusters...), eds(1, assignments...), unhealthy(0), unhealthy(1))

	// A graph alone: its first push is looked up (and stored) at once,
	// but a change is left to the tick.
	var own []proto.Message
	for i := range refgraph.SmallPush + 1 {
		own = append(own, edsCluster(fmt.Sprintf("outbound|80||alone-%d", i), "alone"))
	}
	d := refgraph.New(false, grace)
	applyStep(t, d, false, 0, cds(1, own...))
	tick(d)
	applyStep(t, d, false, 1, eds(2, cla("alone", core.HealthStatus_HEALTHY)))
	sharedAtTick(t, d, "a change to a graph whose nodes no other shared", cds(1, own...), eds(2, cla("alone", core.HealthStatus_HEALTHY)))
}

// sharedAtTick checks that g, after what, holds its nodes as its own until
// the tick, when it shares them with a graph sent steps.
func sharedAtTick(t *testing.T, g *refgraph.Graph, what string, steps ...step) {
	t.Helper()
	twin := refgraph.New(false, grace)
	for i, s := range steps {
		applyStep(t, twin, false, i, s)
	}
	twin.ShareNodes()
	if g.SharesNodesWith(twin) {
		t.Errorf("after %s, the graph's nodes are shared, want its own until the tick", what)
	}
	g.Tick(start)
	if !g.SharesNodesWith(twin) {
		t.Errorf("after %s and the tick, graphs holding the same nodes do not share them", what)
	}
}
