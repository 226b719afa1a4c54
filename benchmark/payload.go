package benchmark

import (
	"fmt"
	"strings"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/adstap/adstap/codec"
)

// The gRPC methods of ADS.
const (
	methodSotW  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	methodDelta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
)

// controlPlaneID is the identifier every response of the bench upstream carries.
const controlPlaneID = "adstap-bench-upstream"

// msg is one pre-encoded message. Its parts, concatenated, are the message;
// parts may be shared between messages (a large body with a small header and
// trailer of its own) and are never written after they are built.
type msg struct {
	Parts [][]byte
	Len   int
	Hash  uint64 // xxhash64 of the whole message
}

func newMsg(parts ...[]byte) msg {
	d := xxhash.New()
	n := 0
	for _, p := range parts {
		d.Write(p)
		n += len(p)
	}
	return msg{Parts: parts, Len: n, Hash: d.Sum64()}
}

// Bytes returns the message in one slice (a copy when it has several parts).
func (m msg) Bytes() []byte {
	if len(m.Parts) == 1 {
		return m.Parts[0]
	}
	out := make([]byte, 0, m.Len)
	for _, p := range m.Parts {
		out = append(out, p...)
	}
	return out
}

// frame wraps the message for the pass-through codec. The buffers are not
// pooled, so gRPC's Free after the write leaves them as they are.
func (m msg) frame() *codec.RawMessage {
	data := make(mem.BufferSlice, len(m.Parts))
	for i, p := range m.Parts {
		data[i] = mem.SliceBuffer(p)
	}
	return &codec.RawMessage{Data: data}
}

// hashOf is the xxhash64 of a received message, read in place.
func hashOf(data mem.BufferSlice) uint64 {
	d := xxhash.New()
	for _, b := range data {
		d.Write(b.ReadOnlyData())
	}
	return d.Sum64()
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic("bench: marshal: " + err.Error())
	}
	return b
}

// mustAny packs m deterministically. A control plane sends a resource that
// did not change as the bytes it sent before (istiod and go-control-plane
// marshal each resource once and cache it); proto.Marshal orders map
// entries at random, and would make every cluster with metadata look changed
// in every push.
func mustAny(m proto.Message) *anypb.Any {
	a := new(anypb.Any)
	if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
		panic("bench: any: " + err.Error())
	}
	return a
}

// node is the identity client i sends in its first request: an Istio
// sidecar's, with the metadata istio-agent fills in.
func node(i int) *core.Node {
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE":     fmt.Sprintf("ns-%d", i%17),
		"ISTIO_VERSION": "1.28.0",
		"CLUSTER_ID":    "Kubernetes",
		"MESH_ID":       "cluster.local",
		"NAME":          fmt.Sprintf("bench-%05d-7d9f8c6b5-x2x9z", i),
		"LABELS":        map[string]any{"app": fmt.Sprintf("bench-%05d", i), "version": "v1"},
	})
	if err != nil {
		panic(err)
	}
	return &core.Node{
		Id:                   fmt.Sprintf("sidecar~10.%d.%d.%d~bench-%05d-7d9f8c6b5-x2x9z.ns-%d~ns-%d.svc.cluster.local", i>>16&255, i>>8&255, i&255, i, i%17, i%17),
		Cluster:              fmt.Sprintf("bench-%05d.ns-%d", i, i%17),
		Metadata:             md,
		Locality:             &core.Locality{Region: "bench", Zone: "bench-a"},
		UserAgentName:        "envoy",
		UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.36.0"},
	}
}

// sotwBody is the resources field of a DiscoveryResponse, encoded once and
// shared by every push that carries the same resources.
func sotwBody(resources []proto.Message) []byte {
	var body []byte
	for _, r := range resources {
		body = protowire.AppendTag(body, 2, protowire.BytesType)
		body = protowire.AppendBytes(body, mustMarshal(mustAny(r)))
	}
	return body
}

// sotwPush is a DiscoveryResponse made of a header (version_info), a shared
// body (resources) and a trailer (type_url, nonce, control_plane), in field
// order: exactly the bytes proto.Marshal gives for the same message, so a
// typed relay that re-marshals it sends the same bytes on.
func sotwPush(version, nonce, typeURL string, body []byte) msg {
	head := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), version)
	tail := protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), typeURL)
	tail = protowire.AppendString(protowire.AppendTag(tail, 5, protowire.BytesType), nonce)
	tail = protowire.AppendTag(tail, 6, protowire.BytesType)
	tail = protowire.AppendBytes(tail, mustMarshal(&core.ControlPlane{Identifier: controlPlaneID}))
	return newMsg(head, body, tail)
}

// sotwACK is the request that accepts a push.
func sotwACK(version, nonce, typeURL string, names []string) []byte {
	return mustMarshal(&discovery.DiscoveryRequest{VersionInfo: version, ResponseNonce: nonce, TypeUrl: typeURL, ResourceNames: names})
}

// endpoints is a ClusterLoadAssignment for cluster with n endpoints; seed
// moves its addresses, so different seeds give different contents.
func endpoints(cluster string, n, seed int) *endpointv3.ClusterLoadAssignment {
	lbs := make([]*endpointv3.LbEndpoint, n)
	for i := range lbs {
		lbs[i] = &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Protocol:      core.SocketAddress_TCP,
					Address:       fmt.Sprintf("10.%d.%d.%d", (seed>>8)&255, seed&255, i+1),
					PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080},
				}}},
			}},
			HealthStatus:        core.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: cluster,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &core.Locality{Region: "bench", Zone: "bench-a"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints:         lbs,
		}},
	}
}

// clusterName is the Istio-style name of service i.
func clusterName(i int) string {
	return fmt.Sprintf("outbound|8080||svc-%05d.ns-%d.svc.cluster.local", i, i%17)
}

func pushVersion(w string, i int) string { return fmt.Sprintf("%s-2026-01-01T00:00:00Z/%06d", w, i) }
func pushNonce(w string, i int) string {
	return fmt.Sprintf("%s-%06d-%s", w, i, strings.Repeat("0", 24))
}

// streamNonce is push i's nonce for one stream: pushNonce's length, with
// the stream's own in place of its zeros, as istiod gives each stream's
// response a nonce of its own.
func streamNonce(w string, i, stream int) string {
	return fmt.Sprintf("%s-%06d-%024x", w, i, uint64(stream+1)*0x9e3779b97f4a7c15)
}

func sizeMB(n int) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
