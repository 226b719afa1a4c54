package codec_test

import (
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// envoyNode is what an Istio sidecar sends on the first request of a stream,
// including metadata the decoder must skip (all but ISTIO_VERSION).
func envoyNode() *corev3.Node {
	return &corev3.Node{
		Id:      "sidecar~10.1.2.3~productpage-v1-6b746f74dc-9stvs.default~default.svc.cluster.local",
		Cluster: "productpage.default",
		Metadata: mustStruct(map[string]any{
			"ISTIO_VERSION": "1.27.0",
			"NAMESPACE":     "default",
			"LABELS":        map[string]any{"app": "productpage"},
		}),
		Locality:       &corev3.Locality{Region: "europe-west1", Zone: "europe-west1-b", SubZone: "rack7"},
		UserAgentName:  "envoy",
		ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning"},
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version:  &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 35, Patch: 3},
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"build.type": structpb.NewStringValue("RELEASE")}},
		}},
	}
}

func wantEnvoyNode() *codec.NodeIdentity {
	return &codec.NodeIdentity{
		ID:               "sidecar~10.1.2.3~productpage-v1-6b746f74dc-9stvs.default~default.svc.cluster.local",
		Cluster:          "productpage.default",
		UserAgentName:    "envoy",
		UserAgentVersion: "1.35.3",
		IstioVersion:     "1.27.0",
		Locality:         codec.Locality{Region: "europe-west1", Zone: "europe-west1-b", SubZone: "rack7"},
	}
}

// withUnknownFields appends fields a newer peer might send, to check they are
// skipped whatever their wire type.
func withUnknownFields(b []byte) []byte {
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendString(b, "from the future")
	b = protowire.AppendTag(b, 100, protowire.VarintType)
	b = protowire.AppendVarint(b, 1<<40)
	b = protowire.AppendTag(b, 101, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 7)
	b = protowire.AppendTag(b, 102, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	b = protowire.AppendTag(b, 103, protowire.StartGroupType)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	b = protowire.AppendTag(b, 103, protowire.EndGroupType)
	return b
}

func TestDecodeRequest(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name  string
		delta bool
		in    []byte
		want  *codec.Request
	}{
		{
			name: "empty message is a valid request with nothing in it",
			in:   nil,
			want: &codec.Request{},
		},
		{
			name: "SotW first CDS request carries the node and no nonce",
			in: marshal(t, &discoveryv3.DiscoveryRequest{
				Node:    envoyNode(),
				TypeUrl: codec.TypeCluster,
			}),
			want: &codec.Request{TypeURL: codec.TypeCluster, Node: wantEnvoyNode()},
		},
		{
			name: "SotW EDS ACK",
			in: marshal(t, &discoveryv3.DiscoveryRequest{
				VersionInfo:   "2021-08-09T16:20:50Z/257",
				ResourceNames: []string{"outbound|8080||a.default.svc.cluster.local", "outbound|9080||b.default.svc.cluster.local"},
				TypeUrl:       codec.TypeEndpoint,
				ResponseNonce: "2021-08-09T16:20:50Z/2576d7b4b1c-5e43-4f4b-9b0b-0c4f3e1a2f10",
			}),
			want: &codec.Request{
				TypeURL:       codec.TypeEndpoint,
				VersionInfo:   "2021-08-09T16:20:50Z/257",
				ResponseNonce: "2021-08-09T16:20:50Z/2576d7b4b1c-5e43-4f4b-9b0b-0c4f3e1a2f10",
				ResourceNames: []string{"outbound|8080||a.default.svc.cluster.local", "outbound|9080||b.default.svc.cluster.local"},
			},
		},
		{
			name: "SotW NACK keeps the last accepted version and carries error_detail",
			in: marshal(t, &discoveryv3.DiscoveryRequest{
				VersionInfo:   "v1",
				TypeUrl:       codec.TypeListener,
				ResponseNonce: "n2",
				ErrorDetail: &statuspb.Status{
					Code:    3,
					Message: "Error adding/updating listener(s) 0.0.0.0_8080: duplicate listener",
				},
			}),
			want: &codec.Request{
				TypeURL:       codec.TypeListener,
				VersionInfo:   "v1",
				ResponseNonce: "n2",
				ErrorDetail:   &codec.ErrorDetail{Code: 3, Message: "Error adding/updating listener(s) 0.0.0.0_8080: duplicate listener"},
			},
		},
		{
			name: "an empty error_detail is still a NACK",
			in: marshal(t, &discoveryv3.DiscoveryRequest{
				TypeUrl: codec.TypeCluster, ResponseNonce: "n1", ErrorDetail: &statuspb.Status{},
			}),
			want: &codec.Request{TypeURL: codec.TypeCluster, ResponseNonce: "n1", ErrorDetail: &codec.ErrorDetail{}},
		},
		{
			name: "proxyless gRPC sends a plain user_agent_version",
			in: marshal(t, &discoveryv3.DiscoveryRequest{
				Node: &corev3.Node{
					Id:                   "projects/123/networks/default/nodes/abc",
					UserAgentName:        "gRPC Go",
					UserAgentVersionType: &corev3.Node_UserAgentVersion{UserAgentVersion: "1.85.0"},
				},
				TypeUrl:       codec.TypeListener,
				ResourceNames: []string{"xds:///greeter"},
			}),
			want: &codec.Request{
				TypeURL:       codec.TypeListener,
				Node:          &codec.NodeIdentity{ID: "projects/123/networks/default/nodes/abc", UserAgentName: "gRPC Go", UserAgentVersion: "1.85.0"},
				ResourceNames: []string{"xds:///greeter"},
			},
		},
		{
			name: "SotW resource_locators count as resource names",
			in: marshal(t, &discoveryv3.DiscoveryRequest{
				TypeUrl:       codec.TypeEndpoint,
				ResourceNames: []string{"a"},
				ResourceLocators: []*discoveryv3.ResourceLocator{
					{Name: "b", DynamicParameters: map[string]string{"shard": "1"}},
				},
			}),
			want: &codec.Request{TypeURL: codec.TypeEndpoint, ResourceNames: []string{"a", "b"}},
		},
		{
			name: "SotW resource names not in UTF-8 are made valid, the others kept as sent",
			in: func() []byte {
				b := protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), codec.TypeEndpoint)
				for _, n := range []string{"a", "\xffb", "", "outbound|8080||c.default.svc.cluster.local"} {
					b = protowire.AppendString(protowire.AppendTag(b, 3, protowire.BytesType), n)
				}
				return b
			}(),
			want: &codec.Request{TypeURL: codec.TypeEndpoint, ResourceNames: []string{"a", "\uFFFDb", "", "outbound|8080||c.default.svc.cluster.local"}},
		},
		{
			name: "syncz request from istioctl and unknown fields",
			in: withUnknownFields(marshal(t, &discoveryv3.DiscoveryRequest{
				TypeUrl: codec.TypeSyncz,
				Node:    &corev3.Node{Id: "istioctl"},
			})),
			want: &codec.Request{TypeURL: codec.TypeSyncz, Node: &codec.NodeIdentity{ID: "istioctl"}},
		},
		{
			name: "unknown type URL",
			in: marshal(t, &discoveryv3.DiscoveryRequest{
				TypeUrl: "type.googleapis.com/example.v1.Widget", ResponseNonce: "x",
			}),
			want: &codec.Request{TypeURL: "type.googleapis.com/example.v1.Widget", ResponseNonce: "x"},
		},
		{
			name:  "Delta first request after a reconnect",
			delta: true,
			in: marshal(t, &discoveryv3.DeltaDiscoveryRequest{
				Node:                   envoyNode(),
				TypeUrl:                codec.TypeCluster,
				ResourceNamesSubscribe: []string{"*"},
				InitialResourceVersions: map[string]string{
					"outbound|8080||a.default.svc.cluster.local": "2021-08-09T16:20:50Z/257",
					"BlackHoleCluster":                           "2021-08-09T16:20:50Z/250",
				},
			}),
			want: &codec.Request{
				Delta:     true,
				TypeURL:   codec.TypeCluster,
				Node:      wantEnvoyNode(),
				Subscribe: []string{"*"},
				InitialVersions: map[string]string{
					"outbound|8080||a.default.svc.cluster.local": "2021-08-09T16:20:50Z/257",
					"BlackHoleCluster":                           "2021-08-09T16:20:50Z/250",
				},
			},
		},
		{
			name:  "Delta ACK that also changes the subscription",
			delta: true,
			in: marshal(t, &discoveryv3.DeltaDiscoveryRequest{
				TypeUrl:                  codec.TypeEndpoint,
				ResponseNonce:            "n7",
				ResourceNamesSubscribe:   []string{"c", "d"},
				ResourceNamesUnsubscribe: []string{"a"},
				ResourceLocatorsSubscribe: []*discoveryv3.ResourceLocator{
					{Name: "e"},
				},
				ResourceLocatorsUnsubscribe: []*discoveryv3.ResourceLocator{
					{Name: "b", DynamicParameters: map[string]string{"k": "v"}},
				},
			}),
			want: &codec.Request{
				Delta:         true,
				TypeURL:       codec.TypeEndpoint,
				ResponseNonce: "n7",
				Subscribe:     []string{"c", "d", "e"},
				Unsubscribe:   []string{"a", "b"},
			},
		},
		{
			name:  "Delta NACK",
			delta: true,
			in: marshal(t, &discoveryv3.DeltaDiscoveryRequest{
				TypeUrl:       codec.TypeRoute,
				ResponseNonce: "n9",
				ErrorDetail:   &statuspb.Status{Code: 13, Message: "Proto constraint validation failed"},
			}),
			want: &codec.Request{
				Delta:         true,
				TypeURL:       codec.TypeRoute,
				ResponseNonce: "n9",
				ErrorDetail:   &codec.ErrorDetail{Code: 13, Message: "Proto constraint validation failed"},
			},
		},
		{
			name:  "Delta initial_resource_versions entry with an empty version",
			delta: true,
			in: marshal(t, &discoveryv3.DeltaDiscoveryRequest{
				TypeUrl:                 codec.TypeSecret,
				InitialResourceVersions: map[string]string{"default": ""},
			}),
			want: &codec.Request{Delta: true, TypeURL: codec.TypeSecret, InitialVersions: map[string]string{"default": ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := codec.DecodeRequest(tt.in, tt.delta)
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodeRequest mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// Protobuf merges a message field that occurs twice and lets the last
// occurrence of a scalar win; a decoder that did otherwise would read a
// different request than the control plane does.
func TestDecodeRequestMergesRepeatedMessages(t *testing.T) {
	leakcheck.Check(t)
	first := marshal(t, &discoveryv3.DiscoveryRequest{
		Node: &corev3.Node{
			Id:       "first",
			Cluster:  "c",
			Locality: &corev3.Locality{Region: "r"},
			UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
				Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 2, Patch: 3},
			}},
		},
		ErrorDetail: &statuspb.Status{Code: 5, Message: "m"},
	})
	second := marshal(t, &discoveryv3.DiscoveryRequest{
		Node: &corev3.Node{
			Id:       "second",
			Locality: &corev3.Locality{Zone: "z"},
			UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
				Version: &typev3.SemanticVersion{MinorNumber: 9},
			}},
		},
		ErrorDetail: &statuspb.Status{Code: 6},
	})
	in := append(first, second...)

	var pb discoveryv3.DiscoveryRequest
	if err := proto.Unmarshal(in, &pb); err != nil {
		t.Fatal(err)
	}
	got, err := codec.DecodeRequest(in, false)
	if err != nil {
		t.Fatal(err)
	}
	want := &codec.Request{
		Node: &codec.NodeIdentity{
			ID: pb.Node.Id, Cluster: pb.Node.Cluster, UserAgentVersion: "1.9.3",
			Locality: codec.Locality{Region: pb.Node.Locality.Region, Zone: pb.Node.Locality.Zone},
		},
		ErrorDetail: &codec.ErrorDetail{Code: pb.ErrorDetail.Code, Message: pb.ErrorDetail.Message},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeRequest mismatch (-want +got):\n%s", diff)
	}
	if v := pb.Node.GetUserAgentBuildVersion().GetVersion(); v.MajorNumber != 1 || v.MinorNumber != 9 || v.Patch != 3 {
		t.Errorf("test premise: protobuf merged the build version into %v", v)
	}
}

func TestDecodeRequestCopiesStrings(t *testing.T) {
	leakcheck.Check(t)
	in := marshal(t, &discoveryv3.DeltaDiscoveryRequest{
		Node:                    &corev3.Node{Id: "node"},
		TypeUrl:                 "type.googleapis.com/example.v1.Widget",
		ResponseNonce:           "nonce",
		ResourceNamesSubscribe:  []string{"sub"},
		InitialResourceVersions: map[string]string{"k": "v"},
		ErrorDetail:             &statuspb.Status{Message: "msg"},
	})
	got, err := codec.DecodeRequest(in, true)
	if err != nil {
		t.Fatal(err)
	}
	want := &codec.Request{
		Delta: true, TypeURL: "type.googleapis.com/example.v1.Widget", ResponseNonce: "nonce",
		Node: &codec.NodeIdentity{ID: "node"}, Subscribe: []string{"sub"}, InitialVersions: map[string]string{"k": "v"},
		ErrorDetail: &codec.ErrorDetail{Message: "msg"},
	}
	clear(in)
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("request changed when its frame was overwritten (-want +got):\n%s", diff)
	}
}
