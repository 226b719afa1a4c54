package origin_test

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// ackedChanges pushes each response through a tracker that hands over what
// it kept, ACKs it, and returns what origin.Changed reads of each push, and
// whether the tracker holds no byte once they are read.
func ackedChanges(t *testing.T, pushes ...mem.BufferSlice) ([]origin.Stamped, bool) {
	t.Helper()
	tr := track.New(track.Config{})
	tr.TakeChanged()
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	tr.OpenStream(track.StreamMeta{ID: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", OpenedAt: at})
	tr.Request(1, at, &codec.Request{TypeURL: clusterType}, 10)
	var got []origin.Stamped
	for _, data := range pushes {
		var resp codec.Response
		if err := resp.DecodeBuffers(data, false); err != nil {
			t.Fatal(err)
		}
		tr.ResponseFrame(1, at, &resp, data.Len(), data)
		for _, e := range tr.Request(1, at, &codec.Request{TypeURL: clusterType, ResponseNonce: resp.Nonce, VersionInfo: resp.VersionInfo}, 10) {
			if e, ok := e.(track.PushEnded); ok {
				if e.Changed == nil {
					t.Fatalf("push %s: its ACK's PushEnded hands over nothing", resp.VersionInfo)
				}
				got = append(got, origin.Changed(e.Changed))
			}
		}
	}
	return got, tr.Kept().Bytes == 0
}

func paths(s origin.Stamped) []string {
	var out []string
	for _, o := range s.Objects {
		out = append(out, o.Ref())
	}
	return out
}

// TestChangedNamesTheObjectsOfWhatThePushChanged: the first push brings
// every cluster, so every stamp counts; the second changes one cluster,
// and only its object is named, though the push resends the others.
func TestChangedNamesTheObjectsOfWhatThePushChanged(t *testing.T) {
	leakcheck.Check(t)
	plain := xdsconfig.Cluster("outbound|9080||ratings.shop.svc.cluster.local", true)
	reviews := stamped("outbound|9080||reviews.shop.svc.cluster.local", "reviews")
	v1 := stamped("outbound|9080|v1|reviews.shop.svc.cluster.local", "reviews") // the same rule: named once
	changed := stamped("outbound|9080||ratings.shop.svc.cluster.local", "ratings")
	changed.ConnectTimeout = nil

	got, released := ackedChanges(t,
		responseN(t, 1, []*clusterv3.Cluster{plain, reviews, v1}),
		responseN(t, 2, []*clusterv3.Cluster{changed, reviews, v1}),
	)
	want := [][]string{
		{"destination-rule/shop/reviews"},
		{"destination-rule/shop/ratings"},
	}
	if diff := cmp.Diff(want, []([]string){paths(got[0]), paths(got[1])}); diff != "" {
		t.Errorf("objects of what each push changed (-want +got):\n%s", diff)
	}
	if !released {
		t.Error("the tracker still counts bytes once origin.Changed read them")
	}
}

// TestChangedIsTheTypedReadWithoutUnmarshalling: on the shapes istiod
// stamps (clusters, a route configuration gathering the virtual hosts of
// several VirtualServices), the scan finds what opening the resources
// finds (origin.Of, for a NACK that names nothing).
func TestChangedIsTheTypedReadWithoutUnmarshalling(t *testing.T) {
	leakcheck.Check(t)
	route := xdsconfig.Route("80", "reviews.shop.svc.cluster.local", "outbound|9080||reviews.shop.svc.cluster.local")
	for i, vs := range []string{"reviews", "ratings", "details"} {
		vh := &routev3.VirtualHost{Name: fmt.Sprintf("%s.shop.svc.cluster.local:80", vs), Domains: []string{vs},
			Metadata: xdsconfig.IstioConfig("virtual-service", "shop", vs)}
		if i == 0 {
			vh = route.VirtualHosts[0]
			vh.Metadata = xdsconfig.IstioConfig("virtual-service", "shop", vs)
			continue
		}
		route.VirtualHosts = append(route.VirtualHosts, vh)
	}
	rc, err := anypb.New(route)
	if err != nil {
		t.Fatal(err)
	}
	data := response(t, []*clusterv3.Cluster{stamped("outbound|9080||reviews.shop.svc.cluster.local", "reviews"), xdsconfig.Cluster("plain", true)}, rc)
	r, _ := rejectedBy(t, data, "something went wrong")
	x := origin.Of(r)
	var typed []string
	for _, o := range x.Objects() {
		typed = append(typed, o.Ref())
	}
	if len(typed) != 4 {
		t.Fatalf("the typed read found %v, want 4 objects", typed)
	}
	if diff := cmp.Diff(typed, paths(x.Changed())); diff != "" {
		t.Errorf("scanned objects (-typed +scanned):\n%s", diff)
	}
}

// TestChangedIsNotFooledByPathsElsewhere: a path in a name, or a "config"
// entry whose value is not a lone string, is not a stamp.
func TestChangedIsNotFooledByPathsElsewhere(t *testing.T) {
	leakcheck.Check(t)
	const path = "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews"
	named := xdsconfig.Cluster(path, true)
	listed := xdsconfig.Cluster("listed", true)
	list, err := structpb.NewValue([]any{path})
	if err != nil {
		t.Fatal(err)
	}
	listed.Metadata = &core.Metadata{FilterMetadata: map[string]*structpb.Struct{"istio": {Fields: map[string]*structpb.Value{"config": list}}}}
	got, _ := ackedChanges(t, responseN(t, 1, []*clusterv3.Cluster{named, listed}))
	if len(got[0].Objects) != 0 {
		t.Errorf("objects %v, want none", paths(got[0]))
	}
}

// TestChangedStopsAtMaxChanged: a push changing more objects than a span
// carries names MaxChanged of them and says there were more.
func TestChangedStopsAtMaxChanged(t *testing.T) {
	leakcheck.Check(t)
	var clusters []*clusterv3.Cluster
	for i := range origin.MaxChanged + 4 {
		clusters = append(clusters, stamped(fmt.Sprintf("c%d", i), fmt.Sprintf("rule-%d", i)))
	}
	got, released := ackedChanges(t, responseN(t, 1, clusters))
	if n := len(got[0].Objects); n != origin.MaxChanged || !got[0].Truncated {
		t.Errorf("%d objects, truncated %v; want %d, truncated", n, got[0].Truncated, origin.MaxChanged)
	}
	if !released {
		t.Error("the tracker still counts bytes once origin.Changed read them")
	}
}

func TestKebabKind(t *testing.T) {
	leakcheck.Check(t)
	for kind, want := range map[string]string{"DestinationRule": "destination-rule", "Sidecar": "sidecar", "ServiceEntry": "service-entry"} {
		if got := origin.KebabKind(kind); got != want {
			t.Errorf("KebabKind(%q) = %q, want %q", kind, got, want)
		}
	}
}
