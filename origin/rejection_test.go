package origin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/origin"
)

// response marshals a SotW response of clusters and any extra resources, as
// the tap would hand it over.
func response(t *testing.T, clusters []*clusterv3.Cluster, extra ...*anypb.Any) mem.BufferSlice {
	t.Helper()
	r := &discoveryv3.DiscoveryResponse{TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster", VersionInfo: "1", Nonce: "n1"}
	for _, c := range clusters {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		r.Resources = append(r.Resources, a)
	}
	r.Resources = append(r.Resources, extra...)
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// stamped is a cluster istiod built from the DestinationRule shop/rule.
func stamped(name, rule string) *clusterv3.Cluster {
	c := xdsconfig.Cluster(name, true)
	c.Metadata = xdsconfig.IstioConfig("destination-rule", "shop", rule)
	return c
}

func TestSummary(t *testing.T) {
	var many []*clusterv3.Cluster
	for i := range 5 {
		many = append(many, stamped(fmt.Sprintf("c%d", i), fmt.Sprintf("r%d", i)))
	}
	unknown := &anypb.Any{TypeUrl: "type.googleapis.com/example.Unknown", Value: []byte{0x0a, 0x01, 'u'}}
	tests := []struct {
		name  string
		r     *origin.Rejection
		want  string
		error bool
	}{
		{name: "none", r: nil, want: ""},
		{name: "five objects, whole push", r: origin.NewRejection(response(t, many), false, nil, nil),
			want: "the message names no resource; the push comes from DestinationRule shop/r0, DestinationRule shop/r1, DestinationRule shop/r2 and 2 more"},
		{name: "two named", r: origin.NewRejection(response(t, many), false, []string{"c1", "c3"}, nil),
			want: "from one of DestinationRule shop/r1, DestinationRule shop/r3"},
		{name: "named, none recorded", r: origin.NewRejection(response(t, []*clusterv3.Cluster{xdsconfig.Cluster("a", true), xdsconfig.Cluster("b", true)}), false, []string{"a", "b"}, nil),
			want: "no Istio config recorded in the 2 resources the message names"},
		{name: "whole push, none recorded", r: origin.NewRejection(response(t, []*clusterv3.Cluster{xdsconfig.Cluster("a", true), xdsconfig.Cluster("b", true)}), false, nil, nil),
			want: "no Istio config recorded in any of the 2 pushed resources"},
		{name: "a type adstap cannot open", r: origin.NewRejection(response(t, nil, unknown), false, []string{"u"}, nil),
			want: `Istio source unknown: resource "u": `, error: true},
		{name: "bytes that are no response", r: origin.NewRejection(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff})}, false, nil, nil),
			want: "Istio source unknown: ", error: true},
		{name: "not kept", r: origin.NotKept(nil, "no room"), want: "Istio source unknown: the rejected push was not kept: no room", error: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.Summary()
			if tt.error && !strings.HasPrefix(got, tt.want) || !tt.error && got != tt.want {
				t.Errorf("Summary() = %q, want %q", got, tt.want)
			}
			if _, err := tt.r.Resources(); (err != nil) != tt.error {
				t.Errorf("Resources() error = %v, want error %v", err, tt.error)
			}
		})
	}
}

func TestDecodedOnceAndReleased(t *testing.T) {
	released := 0
	r := origin.NewRejection(response(t, []*clusterv3.Cluster{stamped("c", "reviews")}), false, []string{"c"}, func() { released++ })
	for range 3 {
		if got := r.Summary(); got != "from DestinationRule shop/reviews" {
			t.Fatalf("Summary() = %q", got)
		}
	}
	if released != 1 {
		t.Errorf("release called %d times, want once", released)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"resources":[{"name":"c","istio_config":[{"kind":"DestinationRule","namespace":"shop","name":"reviews",` +
		`"path":"/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews","kubectl":"kubectl get destinationrule -n shop reviews"}]}],` +
		`"summary":"from DestinationRule shop/reviews"}`
	if string(b) != want {
		t.Errorf("JSON:\n got %s\nwant %s", b, want)
	}

	// A client of /debug/streams reads back what the tap said.
	var back origin.Rejection
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Summary(); got != "from DestinationRule shop/reviews" {
		t.Errorf("read back, Summary() = %q", got)
	}
	if objs := back.Objects(); len(objs) != 1 || objs[0].Kubectl() != "kubectl get destinationrule -n shop reviews" {
		t.Errorf("read back, Objects() = %+v", objs)
	}
	if again, _ := json.Marshal(&back); string(again) != want {
		t.Errorf("read back and written again:\n got %s\nwant %s", again, want)
	}
}
