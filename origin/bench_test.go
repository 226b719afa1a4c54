package origin

import (
	"fmt"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/track"
)

// meshPush is a CDS push of 10,000 Istio-shaped clusters, one in 100 built
// from a DestinationRule, as the tap holds it.
func meshPush(b *testing.B) (mem.BufferSlice, string) {
	b.Helper()
	r := &discoveryv3.DiscoveryResponse{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", VersionInfo: "1", Nonce: "n1"}
	named := ""
	for i, c := range xdsconfig.Clusters(10_000, 0) {
		c := c.(*clusterv3.Cluster)
		if i%100 == 0 {
			c.Metadata = xdsconfig.IstioConfig("destination-rule", fmt.Sprintf("ns-%d", i%17), fmt.Sprintf("dr-%d", i))
			named = c.Name
		}
		a, err := anypb.New(c)
		if err != nil {
			b.Fatal(err)
		}
		r.Resources = append(r.Resources, a)
	}
	raw, err := proto.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	return mem.BufferSlice{mem.SliceBuffer(raw)}, named
}

// The three side by side, in one run: reading the push's envelope, as the
// tracker does for every push; reading what a NACK naming one cluster
// rejected; and what a NACK naming nothing rejected (the whole push under
// suspicion). The last two are paid once per distinct NACK.
func BenchmarkEnvelope10k(b *testing.B) {
	data, _ := meshPush(b)
	var resp codec.Response
	for b.Loop() {
		if err := resp.DecodeBuffers(data, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadNamed10k(b *testing.B) {
	data, name := meshPush(b)
	r := &track.Rejected{Names: []string{name}, Message: "resource " + name + ": unexpected lbPolicy MAGLEV"}
	for b.Loop() {
		if x := read(r, data).(*Rejection); len(x.Objects()) != 1 {
			b.Fatalf("objects %v", x.Objects())
		}
	}
}

func BenchmarkReadWholePush10k(b *testing.B) {
	data, _ := meshPush(b)
	r := &track.Rejected{Message: "something went wrong"}
	for b.Loop() {
		if x := read(r, data).(*Rejection); len(x.Objects()) != 100 {
			b.Fatalf("%d objects", len(x.Objects()))
		}
	}
}
