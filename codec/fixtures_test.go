package codec_test

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ads is the config source Istio gives every EDS cluster and SDS secret.
func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		InitialFetchTimeout:   durationpb.New(0),
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func marshal(tb testing.TB, m proto.Message) []byte {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatalf("marshal %T: %v", m, err)
	}
	return b
}

// istioCluster is shaped like an outbound cluster istiod sends a sidecar (EDS,
// mTLS transport socket match, circuit breakers, istio metadata): about 1 KB
// on the wire, which is what makes a 10 MB CDS push 10,000 clusters.
func istioCluster(i int) *clusterv3.Cluster {
	host := fmt.Sprintf("svc-%05d.ns-%03d.svc.cluster.local", i, i%100)
	name := fmt.Sprintf("outbound|8080||%s", host)
	tls := &tlsv3.UpstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams: &tlsv3.TlsParameters{
				TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
				TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
			},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "default", SdsConfig: ads()}},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
					ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "ROOTCA", SdsConfig: ads()},
				},
			},
			AlpnProtocols: []string{"istio-peer-exchange", "istio"},
		},
		Sni: fmt.Sprintf("outbound_.8080_._.%s", host),
	}
	max := wrapperspb.UInt32(4294967295)
	protocolOptions := &upstreamhttpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: &corev3.HttpProtocolOptions{IdleTimeout: durationpb.New(time.Hour)},
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
				Http2ProtocolOptions: &corev3.Http2ProtocolOptions{MaxConcurrentStreams: wrapperspb.UInt32(1073741824)},
			},
		},
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads(), ServiceName: name},
		ConnectTimeout:       durationpb.New(10 * time.Second),
		LbPolicy:             clusterv3.Cluster_LEAST_REQUEST,
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": mustAny(protocolOptions),
		},
		CircuitBreakers: &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxConnections: max, MaxPendingRequests: max, MaxRequests: max, MaxRetries: max, TrackRemaining: true,
		}}},
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{
			LocalityConfigSpecifier: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig_{
				LocalityWeightedLbConfig: &clusterv3.Cluster_CommonLbConfig_LocalityWeightedLbConfig{},
			},
		},
		Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"istio": mustStruct(map[string]any{
				"default_original_port": 8080,
				"services": []any{map[string]any{
					"host": host, "name": fmt.Sprintf("svc-%05d", i), "namespace": fmt.Sprintf("ns-%03d", i%100),
				}},
			}),
		}},
		TransportSocketMatches: []*clusterv3.Cluster_TransportSocketMatch{
			{
				Name:  "tlsMode-istio",
				Match: mustStruct(map[string]any{"tlsMode": "istio"}),
				TransportSocket: &corev3.TransportSocket{
					Name:       "envoy.transport_sockets.tls",
					ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(tls)},
				},
			},
			{
				Name:  "tlsMode-disabled",
				Match: &structpb.Struct{},
				TransportSocket: &corev3.TransportSocket{
					Name: "envoy.transport_sockets.raw_buffer",
					ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: &anypb.Any{
						TypeUrl: "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer",
					}},
				},
			},
		},
	}
}

func listener(name string, port uint32) *listenerv3.Listener {
	return &listenerv3.Listener{
		Name: name,
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
		}}},
		TrafficDirection: corev3.TrafficDirection_OUTBOUND,
	}
}

func cla(cluster string, ips ...string) *endpointv3.ClusterLoadAssignment {
	var lbs []*endpointv3.LbEndpoint
	for _, ip := range ips {
		lbs = append(lbs, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
			}}},
		}}})
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: cluster,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:    &corev3.Locality{Region: "eu-west1", Zone: "eu-west1-b"},
			LbEndpoints: lbs,
		}},
	}
}

func secret(name string) *tlsv3.Secret {
	return &tlsv3.Secret{
		Name: name,
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("-----BEGIN CERTIFICATE-----\nMIIB...\n")}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte("-----BEGIN PRIVATE KEY-----\nMIIE...\n")}},
		}},
	}
}
