package codec_test

import (
	"bytes"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func clusterAny(t *testing.T, name string) *anypb.Any {
	t.Helper()
	a, err := anypb.New(&clusterv3.Cluster{Name: name, LbPolicy: clusterv3.Cluster_RING_HASH})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestResourcesOutAndBackIn takes the resources out of captured responses and
// puts them in envelopes of its own: each resource's bytes are the same, and
// protobuf reads the envelopes as it reads any control plane's.
func TestResourcesOutAndBackIn(t *testing.T) {
	leakcheck.Check(t)
	a, b := clusterAny(t, "a"), clusterAny(t, "b")
	sotw, err := proto.Marshal(&discoveryv3.DiscoveryResponse{VersionInfo: "v1", Resources: []*anypb.Any{a, b}, TypeUrl: codec.TypeCluster, Nonce: "7"})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := codec.RawResources(sotw, false)
	if err != nil || len(raw) != 2 {
		t.Fatalf("RawResources = %d entries, %v; want 2", len(raw), err)
	}
	if got := codec.AnyTypeURL(raw[1]); got != codec.TypeCluster {
		t.Errorf("AnyTypeURL = %q", got)
	}
	var c clusterv3.Cluster
	if err := proto.Unmarshal(codec.AnyValue(raw[1]), &c); err != nil || c.GetName() != "b" {
		t.Errorf("AnyValue holds %v (%v), want cluster b", &c, err)
	}

	out := codec.AppendSotWResponse(nil, codec.TypeCluster, "v9", "n1", raw[1:])
	var got discoveryv3.DiscoveryResponse
	if err := proto.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetVersionInfo() != "v9" || got.GetNonce() != "n1" || got.GetTypeUrl() != codec.TypeCluster || len(got.GetResources()) != 1 {
		t.Fatalf("SotW envelope read back as %v", &got)
	}
	if again, _ := codec.RawResources(out, false); !bytes.Equal(again[0], raw[1]) {
		t.Errorf("the resource's bytes changed in the new envelope")
	}

	wrapped := codec.AppendResource(nil, "a", "h1", raw[0])
	if !bytes.Equal(codec.WrappedAny(wrapped), raw[0]) {
		t.Errorf("WrappedAny does not give back the Any")
	}
	delta := codec.AppendDeltaResponse(nil, codec.TypeCluster, "v2", "n2", [][]byte{wrapped}, []string{"gone"})
	var d discoveryv3.DeltaDiscoveryResponse
	if err := proto.Unmarshal(delta, &d); err != nil {
		t.Fatal(err)
	}
	if d.GetSystemVersionInfo() != "v2" || d.GetNonce() != "n2" || len(d.GetResources()) != 1 || d.GetResources()[0].GetName() != "a" ||
		d.GetResources()[0].GetVersion() != "h1" || len(d.GetRemovedResources()) != 1 || d.GetRemovedResources()[0] != "gone" {
		t.Fatalf("Delta envelope read back as %v", &d)
	}
	rawDelta, err := codec.RawResources(delta, true)
	if err != nil || len(rawDelta) != 1 || !bytes.Equal(rawDelta[0], wrapped) {
		t.Errorf("RawResources(delta) = %v, %v", rawDelta, err)
	}

	req, err := proto.Marshal(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "c"}, TypeUrl: codec.TypeCluster})
	if err != nil {
		t.Fatal(err)
	}
	var n corev3.Node
	if err := proto.Unmarshal(codec.RawNode(req, true), &n); err != nil || n.GetId() != "n" || n.GetCluster() != "c" {
		t.Errorf("RawNode read back as %v (%v)", &n, err)
	}
}
