package codec_test

import (
	"bytes"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/zeebo/xxh3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// want describes the resource an Any should decode to, computing Hash from
// the bytes protobuf put in Any.value.
func want(name, version string, a *anypb.Any) codec.Resource {
	return codec.Resource{
		Name:    []byte(name),
		Version: []byte(version),
		Hash:    xxh3.Hash(a.GetValue()),
	}
}

func TestResponseDecode(t *testing.T) {
	leakcheck.Check(t)
	c1, c2, c3 := mustAny(istioCluster(1)), mustAny(istioCluster(2)), mustAny(&clusterv3.Cluster{Name: "BlackHoleCluster"})
	l1, l2 := mustAny(listener("0.0.0.0_8080", 8080)), mustAny(listener("virtualInbound", 15006))
	e1, e2 := mustAny(cla("outbound|8080||a.default.svc.cluster.local", "10.0.0.1", "10.0.0.2")), mustAny(cla("outbound|9080||b", "10.0.0.3"))
	s1, s2 := mustAny(secret("default")), mustAny(secret("ROOTCA"))
	// A cluster with no name: field 1 is absent and field 2 comes first.
	unnamed := mustAny(&clusterv3.Cluster{ConnectTimeout: durationpb.New(1)})
	// A resource of a type the tap does not know, whose field 1 is a string.
	widget := &anypb.Any{
		TypeUrl: "type.googleapis.com/example.v1.Widget",
		Value:   protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "sprocket"),
	}
	// NameTable keeps a map in field 1: no name to read there.
	nameTable := &anypb.Any{
		TypeUrl: codec.TypeNameTable,
		Value:   protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0x0a, 0x01, 'k'}),
	}
	// A body that is not a protobuf message: the envelope is fine, and the
	// push must still be tracked, so the name is just empty.
	garbage := &anypb.Any{TypeUrl: codec.TypeCluster, Value: []byte{0x0a, 0xff}}
	ttl := mustAny(&discoveryv3.Resource{
		Name: "outbound|8080||ttl.default.svc.cluster.local", Version: "v7",
		Resource: c1, Ttl: durationpb.New(30e9),
	})
	heartbeat := mustAny(&discoveryv3.Resource{Name: "outbound|8080||ttl.default.svc.cluster.local", Version: "v7"})

	tests := []struct {
		name  string
		delta bool
		in    proto.Message
		want  codec.Response
	}{
		{
			name: "SotW CDS",
			in: &discoveryv3.DiscoveryResponse{
				VersionInfo:  "2021-08-09T16:20:50Z/257",
				Resources:    []*anypb.Any{c1, c2, c3},
				TypeUrl:      codec.TypeCluster,
				Nonce:        "2021-08-09T16:20:50Z/2576d7b4b1c",
				ControlPlane: &corev3.ControlPlane{Identifier: "istiod-7d4f9c8b6-x2x9z"},
			},
			want: codec.Response{
				TypeURL: codec.TypeCluster, VersionInfo: "2021-08-09T16:20:50Z/257",
				Nonce: "2021-08-09T16:20:50Z/2576d7b4b1c", ControlPlane: "istiod-7d4f9c8b6-x2x9z",
				Resources: []codec.Resource{
					want("outbound|8080||svc-00001.ns-001.svc.cluster.local", "", c1),
					want("outbound|8080||svc-00002.ns-002.svc.cluster.local", "", c2),
					want("BlackHoleCluster", "", c3),
				},
			},
		},
		{
			name: "SotW LDS",
			in:   &discoveryv3.DiscoveryResponse{VersionInfo: "1", Resources: []*anypb.Any{l1, l2}, TypeUrl: codec.TypeListener, Nonce: "a"},
			want: codec.Response{
				TypeURL: codec.TypeListener, VersionInfo: "1", Nonce: "a",
				Resources: []codec.Resource{want("0.0.0.0_8080", "", l1), want("virtualInbound", "", l2)},
			},
		},
		{
			name: "SotW EDS names a CLA by cluster_name",
			in:   &discoveryv3.DiscoveryResponse{VersionInfo: "2", Resources: []*anypb.Any{e1, e2}, TypeUrl: codec.TypeEndpoint, Nonce: "b"},
			want: codec.Response{
				TypeURL: codec.TypeEndpoint, VersionInfo: "2", Nonce: "b",
				Resources: []codec.Resource{
					want("outbound|8080||a.default.svc.cluster.local", "", e1), want("outbound|9080||b", "", e2),
				},
			},
		},
		{
			name: "SotW SDS",
			in:   &discoveryv3.DiscoveryResponse{VersionInfo: "3", Resources: []*anypb.Any{s1, s2}, TypeUrl: codec.TypeSecret, Nonce: "c"},
			want: codec.Response{
				TypeURL: codec.TypeSecret, VersionInfo: "3", Nonce: "c",
				Resources: []codec.Resource{want("default", "", s1), want("ROOTCA", "", s2)},
			},
		},
		{
			name: "SotW empty response removes everything",
			in:   &discoveryv3.DiscoveryResponse{VersionInfo: "4", TypeUrl: codec.TypeListener, Nonce: "d"},
			want: codec.Response{TypeURL: codec.TypeListener, VersionInfo: "4", Nonce: "d"},
		},
		{
			name: "SotW TTL wrapper and heartbeat take name and version from the Resource",
			in: &discoveryv3.DiscoveryResponse{
				VersionInfo: "5", Resources: []*anypb.Any{ttl, heartbeat, c3}, TypeUrl: codec.TypeCluster, Nonce: "e",
			},
			want: codec.Response{
				TypeURL: codec.TypeCluster, VersionInfo: "5", Nonce: "e",
				Resources: []codec.Resource{
					want("outbound|8080||ttl.default.svc.cluster.local", "v7", c1),
					{Name: []byte("outbound|8080||ttl.default.svc.cluster.local"), Version: []byte("v7"), Heartbeat: true},
					want("BlackHoleCluster", "", c3),
				},
			},
		},
		{
			name: "SotW names: absent field 1, unknown type, Istio type, malformed body",
			in: &discoveryv3.DiscoveryResponse{
				Resources: []*anypb.Any{unnamed, widget, nameTable, garbage},
				TypeUrl:   "type.googleapis.com/example.v1.Mixed",
			},
			want: codec.Response{
				TypeURL: "type.googleapis.com/example.v1.Mixed",
				Resources: []codec.Resource{
					want("", "", unnamed), want("sprocket", "", widget), want("", "", nameTable), want("", "", garbage),
				},
			},
		},
		{
			name:  "Delta CDS with removals",
			delta: true,
			in: &discoveryv3.DeltaDiscoveryResponse{
				SystemVersionInfo: "2021-08-09T16:20:50Z/258",
				Resources: []*discoveryv3.Resource{
					{Name: "outbound|8080||svc-00001.ns-001.svc.cluster.local", Version: "h1", Resource: c1},
					{Name: "renamed-by-the-wrapper", Version: "h2", Resource: c2},
				},
				TypeUrl:              codec.TypeCluster,
				RemovedResources:     []string{"outbound|8080||gone.default.svc.cluster.local"},
				Nonce:                "f",
				ControlPlane:         &corev3.ControlPlane{Identifier: "istiod-1"},
				RemovedResourceNames: []*discoveryv3.ResourceName{{Name: "xdstp://gone/also"}},
			},
			want: codec.Response{
				Delta: true, TypeURL: codec.TypeCluster, VersionInfo: "2021-08-09T16:20:50Z/258", Nonce: "f", ControlPlane: "istiod-1",
				Resources: []codec.Resource{
					want("outbound|8080||svc-00001.ns-001.svc.cluster.local", "h1", c1),
					want("renamed-by-the-wrapper", "h2", c2),
				},
				RemovedResources: []string{"outbound|8080||gone.default.svc.cluster.local", "xdstp://gone/also"},
			},
		},
		{
			name:  "Delta names from resource_name, then from the resource",
			delta: true,
			in: &discoveryv3.DeltaDiscoveryResponse{
				Resources: []*discoveryv3.Resource{
					{ResourceName: &discoveryv3.ResourceName{Name: "from-resource-name"}, Version: "v1", Resource: e1},
					{Version: "v2", Resource: e2},
					{Name: "heartbeat", Version: "v3"},
				},
				TypeUrl: codec.TypeEndpoint,
			},
			want: codec.Response{
				Delta: true, TypeURL: codec.TypeEndpoint,
				Resources: []codec.Resource{
					want("from-resource-name", "v1", e1),
					want("outbound|9080||b", "v2", e2),
					{Name: []byte("heartbeat"), Version: []byte("v3"), Heartbeat: true},
				},
			},
		},
		{
			name:  "Delta removal only",
			delta: true,
			in: &discoveryv3.DeltaDiscoveryResponse{
				TypeUrl: codec.TypeSecret, Nonce: "g", RemovedResources: []string{"file-cert:/etc/certs/a", "default"},
			},
			want: codec.Response{
				Delta: true, TypeURL: codec.TypeSecret, Nonce: "g", RemovedResources: []string{"file-cert:/etc/certs/a", "default"},
			},
		},
	}
	var reused codec.Response
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := withUnknownFields(marshal(t, tt.in))
			var fresh codec.Response
			if err := fresh.Decode(in, tt.delta); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tt.want, fresh, cmpopts.EquateEmpty(), ignoreBody, ignoreScratch); diff != "" {
				t.Errorf("Decode mismatch (-want +got):\n%s", diff)
			}
			// A reused Response must not leak anything from the last decode.
			if err := reused.Decode(in, tt.delta); err != nil {
				t.Fatalf("Decode into a reused Response: %v", err)
			}
			if diff := cmp.Diff(tt.want, reused, cmpopts.EquateEmpty(), ignoreBody, ignoreScratch); diff != "" {
				t.Errorf("Decode into a reused Response mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTypeResourceIsWhatAnypbWrites(t *testing.T) {
	leakcheck.Check(t)
	if got := mustAny(&discoveryv3.Resource{}).GetTypeUrl(); got != codec.TypeResource {
		t.Errorf("anypb names a Resource %q, codec.TypeResource is %q", got, codec.TypeResource)
	}
}

func TestResponseResetDropsViews(t *testing.T) {
	leakcheck.Check(t)
	in := marshal(t, &discoveryv3.DiscoveryResponse{
		Resources: []*anypb.Any{mustAny(istioCluster(1)), mustAny(istioCluster(2))},
		TypeUrl:   codec.TypeCluster,
	})
	var r codec.Response
	if err := r.Decode(in, false); err != nil {
		t.Fatal(err)
	}
	resources := r.Resources[:cap(r.Resources)]
	r.Reset()
	if diff := cmp.Diff(codec.Response{}, r, cmpopts.EquateEmpty(), ignoreBody, ignoreScratch); diff != "" {
		t.Errorf("Reset left (-want +got):\n%s", diff)
	}
	for i, res := range resources {
		if res.Name != nil || res.Version != nil {
			t.Errorf("Reset kept a view into the old buffer in resources[%d]", i)
		}
	}
}

// ignoreBody leaves the views of each resource's Any to TestResourceBodyIsTheAnyValue.
var ignoreBody = cmpopts.IgnoreFields(codec.Resource{}, "TypeURL", "Body")

// ignoreScratch skips the space a Response keeps between decodes, which is
// not part of what it decoded.
var ignoreScratch = cmpopts.IgnoreUnexported(codec.Response{})

func TestResourceBodyIsTheAnyValue(t *testing.T) {
	leakcheck.Check(t)
	c := istioCluster(7)
	a := mustAny(c)
	var r codec.Response
	if err := r.Decode(marshal(t, &discoveryv3.DiscoveryResponse{TypeUrl: codec.TypeCluster, Resources: []*anypb.Any{a}}), false); err != nil {
		t.Fatal(err)
	}
	got := r.Resources[0]
	if string(got.TypeURL) != a.TypeUrl || !bytes.Equal(got.Body, a.Value) {
		t.Errorf("resource views: type %q, %d body bytes; want %q and the Any's %d bytes", got.TypeURL, len(got.Body), a.TypeUrl, len(a.Value))
	}
}
