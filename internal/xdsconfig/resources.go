// Package xdsconfig builds realistic xDS resources (clusters, endpoints, listeners, routes, secrets) for the demo and the tests.
package xdsconfig

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// adsSource points a dependent resource (EDS of a cluster, RDS of a
// listener) back at the ADS stream it came on. grpc-go accepts only ads or
// self here.
func adsSource() *core.ConfigSource {
	return &core.ConfigSource{
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
		ResourceApiVersion:    core.ApiVersion_V3,
	}
}

// Cluster returns a round-robin cluster that grpc-go and Envoy both accept.
// With eds its endpoints come over ADS as a ClusterLoadAssignment named like
// the cluster; without, it is a LOGICAL_DNS cluster resolving name:80, so
// name must then be a valid host name.
func Cluster(name string, eds bool) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:           name,
		ConnectTimeout: durationpb.New(5 * time.Second),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
	}
	if eds {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsSource()}
		return c
	}
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
	c.LoadAssignment = Endpoint(name, name, 80)
	return c
}

// Clusters returns n Istio-shaped EDS clusters ("outbound|8080||svc-N..."),
// each padded to padTo bytes of wire size (or left as is when already
// larger), so a response of a chosen size is easy to make:
// Clusters(1000, 20_000) marshals to a CDS response of about 20 MB. The
// padding is a metadata string, which every xDS client carries without
// interpreting.
func Clusters(n int, padTo int) []types.Resource {
	out := make([]types.Resource, 0, n)
	for i := range n {
		host := fmt.Sprintf("svc-%05d.ns-%d.svc.cluster.local", i, i%17)
		name := "outbound|8080||" + host
		c := Cluster(name, true)
		c.EdsClusterConfig.ServiceName = name
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxConnections:     wrapperspb.UInt32(math.MaxUint32),
			MaxPendingRequests: wrapperspb.UInt32(math.MaxUint32),
			MaxRequests:        wrapperspb.UInt32(math.MaxUint32),
			MaxRetries:         wrapperspb.UInt32(math.MaxUint32),
		}}}
		services, _ := structpb.NewStruct(map[string]any{
			"services": []any{map[string]any{
				"host":      host,
				"name":      fmt.Sprintf("svc-%05d", i),
				"namespace": fmt.Sprintf("ns-%d", i%17),
			}},
		})
		c.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": services}}
		pad(c, services, padTo)
		out = append(out, c)
	}
	return out
}

// pad grows c to exactly padTo bytes. Adding the pad field changes length
// prefixes further out, so the first guess is corrected a few times; a
// padTo within the pad field's own overhead (~20 bytes) above c's natural
// size overshoots.
func pad(c *clusterv3.Cluster, md *structpb.Struct, padTo int) {
	if proto.Size(c) >= padTo {
		return
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	n := padTo - proto.Size(c)
	for range 4 {
		n = max(n, 0)
		md.Fields["adstap_pad"] = structpb.NewStringValue(strings.Repeat(alphabet, n/len(alphabet)+1)[:n])
		diff := padTo - proto.Size(c)
		if diff == 0 {
			return
		}
		n += diff
	}
}

// Endpoint returns the load assignment for clusterName with a single
// endpoint host:port in one weighted locality; grpc-go drops localities
// without a weight.
func Endpoint(clusterName, host string, port uint32) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: clusterName,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &core.Locality{Region: "adstap", Zone: "test"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
						Protocol:      core.SocketAddress_TCP,
						Address:       host,
						PortSpecifier: &core.SocketAddress_PortValue{PortValue: port},
					}}},
				}},
				HealthStatus: core.HealthStatus_HEALTHY,
			}},
		}},
	}
}

// Listener returns an API listener, the kind grpc-go's xDS client resolves a
// target to: an HttpConnectionManager that fetches routeName over ADS and
// ends in the router filter, as grpc-go requires.
func Listener(name, routeName string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: routeName,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{
		Name:        name,
		ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
	}
}

// Route returns a route configuration sending every path on vhostDomain to
// clusterName.
func Route(name, vhostDomain, clusterName string) *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: name,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "vh-" + vhostDomain,
			Domains: []string{vhostDomain},
			Routes: []*routev3.Route{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName},
				}},
			}},
		}},
	}
}

// Secret returns an SDS TLS certificate secret carrying a private key inline,
// as istio-agent serves workload certs to Envoy, so tests can check that
// nothing the tap logs or exports contains the key.
func Secret(name string, certPEM, keyPEM []byte) *tlsv3.Secret {
	return &tlsv3.Secret{
		Name: name,
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: certPEM}},
			PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: keyPEM}},
		}},
	}
}

// WithInlineKey gives c a TLS transport socket whose client certificate's
// private key is inline, Any-wrapped as Envoy reads it (a
// DestinationRule's mutual TLS with its key in the cluster rather than
// served by SDS), so tests can bury a key in a CDS push.
func WithInlineKey(c *clusterv3.Cluster, certPEM, keyPEM []byte) *clusterv3.Cluster {
	c.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{
		TypedConfig: mustAny(&tlsv3.UpstreamTlsContext{Sni: c.Name, CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificates: []*tlsv3.TlsCertificate{{
				CertificateChain: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: certPEM}},
				PrivateKey:       &core.DataSource{Specifier: &core.DataSource_InlineString{InlineString: string(keyPEM)}},
			}},
		}}),
	}}
	return c
}

// KeyedClusters is a large CDS push's resources, packed: n clusters as
// Clusters makes them (padded to padTo bytes), the first 1,000 repeated
// after that, so that a push of tens of megabytes takes a moment to build;
// the clusters at the indexes keyed are distinct ones with an inline TLS
// key (WithInlineKey), buried among the rest.
func KeyedClusters(n, padTo int, keyed []int, certPEM, keyPEM []byte) []*anypb.Any {
	distinct := Clusters(min(n, 1000), padTo)
	out := make([]*anypb.Any, n)
	for i := range out {
		if i < len(distinct) {
			out[i] = mustAny(distinct[i])
		} else {
			out[i] = out[i%len(distinct)]
		}
	}
	for _, i := range keyed {
		c := Clusters(1, padTo)[0].(*clusterv3.Cluster)
		c.Name = fmt.Sprintf("outbound|443||keyed-%d.example", i)
		out[i] = mustAny(WithInlineKey(c, certPEM, keyPEM))
	}
	return out
}

// ResolverNames returns the resource names ResolverResources uses for
// target, so tests can subscribe to them on raw streams or look for them in
// what the tap saw.
func ResolverNames(target string) (listener, route, cluster string) {
	return target, "route-" + target, "cluster-" + target
}

// ResolverResources returns the LDS/RDS/CDS/EDS set that lets grpc-go's xDS
// client resolve xds:///<target> to backendAddr ("127.0.0.1:port"). The
// listener is named target because grpc-go's default listener name
// template is "%s".
func ResolverResources(target string, backendAddr string) map[resource.Type][]types.Resource {
	lName, rName, cName := ResolverNames(target)
	host, port := splitHostPort(backendAddr)
	return map[resource.Type][]types.Resource{
		resource.ListenerType: {Listener(lName, rName)},
		resource.RouteType:    {Route(rName, target, cName)},
		resource.ClusterType:  {Cluster(cName, true)},
		resource.EndpointType: {Endpoint(cName, host, port)},
	}
}

// ResolverResourcesMaglev is ResolverResources with lb_policy MAGLEV on the
// cluster. Envoy accepts it; grpc-go v1.85.0 implements only ROUND_ROBIN,
// RING_HASH and LEAST_REQUEST in that field, so its xDS client NACKs the CDS
// response with
//
//	error parsing "ClusterResource" response: resource "cluster-<target>": unexpected lbPolicy MAGLEV in response: <the cluster in proto text form>
//
// (internal/xds/xdsclient/xdsresource/unmarshal_cds.go and
// internal/xds/clients/xdsclient/channel.go combineErrors). The proto text
// part is not stable: protobuf-go randomizes its spacing on purpose. The NACK
// carries version "" (nothing accepted yet), so go-control-plane's snapshot
// cache re-sends v1 at once and the pair loop (thousands of NACKs a second
// on loopback) until the test sets a good snapshot or closes the client.
func ResolverResourcesMaglev(target string, backendAddr string) map[resource.Type][]types.Resource {
	res := ResolverResources(target, backendAddr)
	res[resource.ClusterType][0].(*clusterv3.Cluster).LbPolicy = clusterv3.Cluster_MAGLEV
	return res
}

func splitHostPort(addr string) (string, uint32) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		panic(fmt.Sprintf("xdsconfig: backend address %q: %v", addr, err))
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		panic(fmt.Sprintf("xdsconfig: backend address %q: bad port: %v", addr, err))
	}
	return host, uint32(port)
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("xdsconfig: pack %T: %v", m, err))
	}
	return a
}

// IstioConfig is the metadata istiod stamps on a resource it built from an
// Istio object (pilot/pkg/networking/util.AddConfigInfoMetadata): kind in
// istiod's kebab case ("destination-rule", "virtual-service"), so that
// go-control-plane resources can name their source as istiod's do.
func IstioConfig(kind, namespace, name string) *core.Metadata {
	s, _ := structpb.NewStruct(map[string]any{
		"config": "/apis/networking.istio.io/v1/namespaces/" + namespace + "/" + kind + "/" + name,
	})
	return &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": s}}
}
