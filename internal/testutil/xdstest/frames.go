package xdstest

import (
	"fmt"
	"math/rand/v2"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/internal/xdsconfig"
)

// ClusterType is the CDS type URL.
const ClusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// ClusterAnys returns n Istio-shaped clusters (xdsconfig.Clusters), each
// padded to padTo bytes, packed for a DiscoveryResponse.
func ClusterAnys(n, padTo int) []*anypb.Any {
	out := make([]*anypb.Any, 0, n)
	for _, c := range xdsconfig.Clusters(n, padTo) {
		a, err := anypb.New(c)
		if err != nil {
			panic(fmt.Sprintf("xdstest: pack a cluster: %v", err))
		}
		out = append(out, a)
	}
	return out
}

// ClusterPush is the wire form of a SotW CDS response of n Istio-shaped
// clusters (xdsconfig.Clusters) of about padTo bytes each, all alike but
// for their names. It encodes one cluster and writes each name in front of
// it, so that a push of 100,000 clusters costs no more than its bytes
// (a field listed twice takes its last value, and a name comes first).
func ClusterPush(n, padTo int, version, nonce string) []byte {
	c := xdsconfig.Clusters(1, padTo)[0].(*clusterv3.Cluster)
	c.Name = ""
	rest := MustMarshal(c)
	b := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), version)
	for i := range n {
		name := fmt.Sprintf("outbound|8080||svc-%05d.ns-%d.svc.cluster.local", i, i%17)
		value := protowire.SizeTag(1) + protowire.SizeBytes(len(name)) + len(rest)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(ClusterType))+protowire.SizeTag(2)+protowire.SizeBytes(value)))
		b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), ClusterType)
		b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.BytesType), uint64(value))
		b = protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), name)
		b = append(b, rest...)
	}
	b = protowire.AppendString(protowire.AppendTag(b, 4, protowire.BytesType), ClusterType)
	return protowire.AppendString(protowire.AppendTag(b, 5, protowire.BytesType), nonce)
}

// PushFrame is the wire form of a SotW DiscoveryResponse.
func PushFrame(typeURL, version, nonce string, resources []*anypb.Any) []byte {
	return MustMarshal(&discovery.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: version, Nonce: nonce, Resources: resources})
}

// RequestFrame is the wire form of a SotW DiscoveryRequest: the first of a
// stream carries node; an answer carries version and nonce, and a NACK its
// error message too.
func RequestFrame(node *core.Node, typeURL, version, nonce, nack string) []byte {
	r := &discovery.DiscoveryRequest{Node: node, TypeUrl: typeURL, VersionInfo: version, ResponseNonce: nonce}
	if nack != "" {
		r.ErrorDetail = &rpcstatus.Status{Code: 3, Message: nack}
	}
	return MustMarshal(r)
}

// MustMarshal is m's wire form; a message that cannot be encoded is a bug
// in the test.
func MustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("xdstest: marshal %T: %v", m, err))
	}
	return b
}

// MustAny is m packed in an Any.
func MustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("xdstest: pack %T: %v", m, err))
	}
	return a
}

// Chunk splits b into pieces of the given sizes in turn, the last one
// taking what is left, as gRPC hands a message over in the buffers it
// received it in; a size of 0 makes an empty piece. Each piece is a copy
// exactly as long as itself, so that a reader running past the end of one
// finds nothing there rather than, by luck, the next one's bytes.
func Chunk(b []byte, sizes ...int) [][]byte {
	var segs [][]byte
	for i := 0; len(b) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(b))
		segs = append(segs, append(make([]byte, 0, n), b[:n]...))
		b = b[n:]
	}
	return segs
}

// RandomSizes are uneven piece sizes for Chunk, from 1 byte to 40 KB, some
// of them 0.
func RandomSizes(seed uint64, n int) []int {
	rng := rand.New(rand.NewPCG(seed, seed))
	sizes := make([]int, n)
	for i := range sizes {
		switch rng.IntN(4) {
		case 0:
			sizes[i] = rng.IntN(3) // empty and tiny pieces
		case 1:
			sizes[i] = 1 + rng.IntN(64) // headers cut anywhere
		default:
			sizes[i] = 1 + rng.IntN(40<<10)
		}
	}
	return sizes
}
