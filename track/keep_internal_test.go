package track

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// The compact form of a push decodes into what the push itself gives for
// the resources it holds: names, versions, types and bodies, byte for byte.
func TestCompactFormDecodesAsThePush(t *testing.T) {
	leakcheck.Check(t)
	any := func(m proto.Message) *anypb.Any {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	wrapped := func(r *discoveryv3.Resource) *anypb.Any { return any(r) }
	c := func(name string) *clusterv3.Cluster {
		return &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(7e9)}
	}
	// An Address is a type whose field 1 is no name: its Any has none.
	addr := &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/tmp/s"}}}
	tests := []struct {
		name  string
		delta bool
		resp  proto.Message
	}{{
		name: "SotW Anys",
		resp: &discoveryv3.DiscoveryResponse{VersionInfo: "v1", TypeUrl: codec.TypeCluster, Nonce: "n1",
			Resources: []*anypb.Any{any(c("a")), any(c("b"))}},
	}, {
		name: "SotW TTL wrappers: a version, a name that is not the body's, a heartbeat",
		resp: &discoveryv3.DiscoveryResponse{VersionInfo: "v1", TypeUrl: codec.TypeCluster, Nonce: "n1",
			Resources: []*anypb.Any{
				wrapped(&discoveryv3.Resource{Name: "a", Version: "r1", Resource: any(c("a"))}),
				wrapped(&discoveryv3.Resource{Name: "alias-of-b", Resource: any(c("b"))}),
				wrapped(&discoveryv3.Resource{Resource: any(c("c"))}),
				wrapped(&discoveryv3.Resource{Name: "d", Ttl: durationpb.New(1e9)}),
			}},
	}, {
		name: "SotW without a version, an Any without a type, a type without names",
		resp: &discoveryv3.DiscoveryResponse{TypeUrl: codec.TypeCluster, Nonce: "n1",
			Resources: []*anypb.Any{{Value: []byte{0x0a, 0x01, 'x'}}, any(addr), {TypeUrl: codec.TypeCluster}}},
	}, {
		name:  "Delta",
		delta: true,
		resp: &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: "v1", TypeUrl: codec.TypeCluster, Nonce: "n1",
			RemovedResources: []string{"gone"},
			Resources: []*discoveryv3.Resource{
				{Name: "a", Version: "r1", Resource: any(c("a"))},
				{Version: "r2", Resource: any(c("b"))},
				{ResourceName: &discoveryv3.ResourceName{Name: "c"}, Resource: any(c("c"))},
				{Name: "d", Resource: &anypb.Any{}},
				{Name: "e"},
			}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.resp)
			if err != nil {
				t.Fatal(err)
			}
			var push codec.Response
			if err := push.Decode(b, tt.delta); err != nil {
				t.Fatal(err)
			}
			size := compactEnvelopeSize(&push)
			var want []codec.Resource
			var all []int32
			for i, r := range push.Resources {
				if !r.Heartbeat {
					size += compactResourceSize(&push.Resources[i], push.Delta)
					want = append(want, r)
					all = append(all, int32(i))
				}
			}
			compact := compactCopy(make([]byte, 0, size), &push, all)
			if len(compact) != size || cap(compact) != size {
				t.Errorf("compact form: %d bytes in %d, want %d in one allocation of that size", len(compact), cap(compact), size)
			}
			var got codec.Response
			if err := got.DecodeBuffers(mem.BufferSlice{mem.SliceBuffer(compact)}, tt.delta); err != nil {
				t.Fatalf("decoding the compact form: %v", err)
			}
			if got.TypeURL != push.TypeURL || got.VersionInfo != push.VersionInfo || got.Nonce != push.Nonce {
				t.Errorf("envelope: %q %q %q, want %q %q %q", got.TypeURL, got.VersionInfo, got.Nonce, push.TypeURL, push.VersionInfo, push.Nonce)
			}
			if diff := cmp.Diff(want, got.Resources, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("resources (-push +compact):\n%s", diff)
			}
		})
	}
}
