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
func meshPush(b testing.TB) (mem.BufferSlice, string) {
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

// What a push span's objects cost, on the span output's goroutine: the scan
// of a whole first push of 10,000 clusters (every one changed), beside the
// envelope above and the typed read of the same push; and of what a push
// after it typically changed, one stamped cluster.
func BenchmarkStampedWholePush10k(b *testing.B) {
	data, _ := meshPush(b)
	var sc Scanner
	for b.Loop() {
		if s := sc.stampedIn(data, false, func(int) bool { return false }); len(s.Objects) != maxChanged || !s.Truncated {
			b.Fatalf("%d objects, truncated %v", len(s.Objects), s.Truncated)
		}
	}
}

func BenchmarkStampedOneCluster(b *testing.B) {
	c := xdsconfig.Cluster("outbound|9080||reviews.shop.svc.cluster.local", true)
	c.Metadata = xdsconfig.IstioConfig("destination-rule", "shop", "reviews")
	a, err := anypb.New(c)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := proto.Marshal(&discoveryv3.DiscoveryResponse{TypeUrl: a.TypeUrl, VersionInfo: "2", Nonce: "n2", Resources: []*anypb.Any{a}})
	if err != nil {
		b.Fatal(err)
	}
	data := mem.BufferSlice{mem.SliceBuffer(raw)}
	var sc Scanner
	b.ReportAllocs()
	for b.Loop() {
		if s := sc.stampedIn(data, false, func(int) bool { return false }); len(s.Objects) != 1 {
			b.Fatalf("%d objects", len(s.Objects))
		}
	}
}
