package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/internal/xdsconfig"
)

// Service is the name the demo's grpc-go client resolves: xds:///greeter.
const Service = "greeter"

// Nodes of the demo's two clients, in Istio's node id format.
const (
	ProxylessNode = "proxyless~127.0.0.1~greeter-client-7d9f.demo~demo.svc.cluster.local"
	DeltaNode     = "sidecar~127.0.0.1~productpage-v1-5c8d.demo~demo.svc.cluster.local"
)

// Scenario changes the configuration every interval, the way a mesh does:
// services come and go, endpoints move, a bad cluster is pushed and rejected,
// then fixed.
type Scenario struct {
	CP       *ControlPlane
	Backend  string // host:port the greeter cluster points at
	Interval time.Duration
	Log      *slog.Logger

	version int
}

// step is one change of the scenario, with what the narrator says about it.
type step struct {
	say   string
	build func(s *Scenario, res map[resource.Type][]types.Resource)
}

var steps = []step{
	{"a first configuration: the greeter service and 4 others", func(*Scenario, map[resource.Type][]types.Resource) {}},
	{"a new service appears (ratings): CDS +1, EDS +1", func(s *Scenario, res map[resource.Type][]types.Resource) {
		s.addService(res, "ratings", "10.0.3.1")
	}},
	{"endpoints of reviews move: EDS ~1", func(s *Scenario, res map[resource.Type][]types.Resource) {
		s.addService(res, "ratings", "10.0.3.1")
		s.moveEndpoint(res, "reviews", "10.0.9.9")
	}},
	{"the same configuration again under a new version: redundant pushes", func(s *Scenario, res map[resource.Type][]types.Resource) {
		s.addService(res, "ratings", "10.0.3.1")
		s.moveEndpoint(res, "reviews", "10.0.9.9")
	}},
	{"a bad cluster: lb_policy MAGLEV on greeter, which both clients reject (NACK); the control plane keeps re-sending it", func(s *Scenario, res map[resource.Type][]types.Resource) {
		s.addService(res, "ratings", "10.0.3.1")
		s.moveEndpoint(res, "reviews", "10.0.9.9")
		_, _, cluster := xdsconfig.ResolverNames(Service)
		for _, r := range res[resource.ClusterType] {
			if c := r.(*clusterv3.Cluster); c.Name == cluster {
				c.LbPolicy = clusterv3.Cluster_MAGLEV
				// As istiod stamps a cluster shaped by a DestinationRule, so
				// the NACK's line names the object to fix.
				c.Metadata = xdsconfig.IstioConfig("destination-rule", "demo", Service+"-maglev")
			}
		}
	}},
	{"(the NACKs go on while nobody fixes the cluster)", nil},
	{"(still rejected)", nil},
	{"the cluster is fixed (ROUND_ROBIN, a longer connect timeout): ACKs again", func(s *Scenario, res map[resource.Type][]types.Resource) {
		s.addService(res, "ratings", "10.0.3.1")
		s.moveEndpoint(res, "reviews", "10.0.9.9")
		_, _, cluster := xdsconfig.ResolverNames(Service)
		for _, r := range res[resource.ClusterType] {
			if c := r.(*clusterv3.Cluster); c.Name == cluster {
				c.ConnectTimeout = durationpb.New(10 * time.Second)
			}
		}
	}},
	{"ratings is removed: CDS -1, EDS -1", func(s *Scenario, res map[resource.Type][]types.Resource) {
		s.moveEndpoint(res, "reviews", "10.0.9.9")
	}},
}

// Run plays the steps in a loop until ctx ends.
func (s *Scenario) Run(ctx context.Context) error {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for i := 0; ; i++ {
		st := steps[i%len(steps)]
		if st.build != nil {
			res := s.base()
			st.build(s, res)
			s.version++
			// istiod's version format: the push's start time and a counter.
			v := time.Now().UTC().Format(time.RFC3339) + "/" + strconv.Itoa(s.version)
			s.Log.Info("demo: pushing v=" + v + ": " + st.say)
			if err := s.CP.Set(v, res, DeltaNode); err != nil {
				return err
			}
			// go-control-plane answers a client that names its resources
			// (grpc-go does) only with exactly those, so the proxyless
			// client gets the greeter's share of the mesh.
			if err := s.CP.Set(v, greeterOnly(res), ProxylessNode); err != nil {
				return err
			}
		} else {
			s.Log.Info("demo: " + st.say)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

var otherServices = []struct{ name, ip string }{
	{"reviews", "10.0.1.1"}, {"details", "10.0.1.2"}, {"productpage", "10.0.1.3"}, {"mongodb", "10.0.1.4"},
}

func (s *Scenario) base() map[resource.Type][]types.Resource {
	res := xdsconfig.ResolverResources(Service, s.Backend)
	for _, o := range otherServices {
		s.addService(res, o.name, o.ip)
	}
	return res
}

func clusterName(svc string) string {
	return "outbound|9080||" + svc + ".demo.svc.cluster.local"
}

func (s *Scenario) addService(res map[resource.Type][]types.Resource, svc, ip string) {
	name := clusterName(svc)
	res[resource.ClusterType] = append(res[resource.ClusterType], xdsconfig.Cluster(name, true))
	res[resource.EndpointType] = append(res[resource.EndpointType], xdsconfig.Endpoint(name, ip, 9080))
}

func (s *Scenario) moveEndpoint(res map[resource.Type][]types.Resource, svc, ip string) {
	name := clusterName(svc)
	eps := res[resource.EndpointType]
	for i, r := range eps {
		if xdsconfigName(r) == name {
			eps[i] = xdsconfig.Endpoint(name, ip, 9080)
		}
	}
}

func xdsconfigName(r types.Resource) string {
	if n, ok := r.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	if n, ok := r.(interface{ GetName() string }); ok {
		return n.GetName()
	}
	return ""
}

// greeterOnly keeps the resources xds:///greeter resolves through.
func greeterOnly(res map[resource.Type][]types.Resource) map[resource.Type][]types.Resource {
	l, r, c := xdsconfig.ResolverNames(Service)
	keep := map[string]bool{l: true, r: true, c: true}
	out := map[resource.Type][]types.Resource{}
	for typ, list := range res {
		for _, x := range list {
			if keep[xdsconfigName(x)] {
				out[typ] = append(out[typ], x)
			}
		}
	}
	return out
}

// Listen opens a loopback listener for one of the demo's parts.
func Listen() (net.Listener, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listening on loopback: %w", err)
	}
	return lis, nil
}
