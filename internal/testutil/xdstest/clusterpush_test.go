package xdstest_test

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// ClusterPush decodes to the clusters ClusterAnys makes, but for what
// follows the name.
func TestClusterPush(t *testing.T) {
	leakcheck.Check(t)
	const n = 3
	b := xdstest.ClusterPush(n, 1000, "v1", "n1")
	var resp discovery.DiscoveryResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.VersionInfo != "v1" || resp.Nonce != "n1" || resp.TypeUrl != xdstest.ClusterType || len(resp.Resources) != n {
		t.Fatalf("decoded version %q, nonce %q, type %q and %d resources; want v1, n1, CDS and %d", resp.VersionInfo, resp.Nonce, resp.TypeUrl, len(resp.Resources), n)
	}
	for i, want := range xdstest.ClusterAnys(n, 1000) {
		var got, w clusterv3.Cluster
		if err := resp.Resources[i].UnmarshalTo(&got); err != nil {
			t.Fatal(err)
		}
		if err := want.UnmarshalTo(&w); err != nil {
			t.Fatal(err)
		}
		if got.Name != w.Name || got.LbPolicy != w.LbPolicy {
			t.Errorf("cluster %d: %q, want %q", i, got.Name, w.Name)
		}
		if d := len(resp.Resources[i].Value) - len(want.Value); d < -8 || d > 8 {
			t.Errorf("cluster %d is %d bytes, ClusterAnys' %d", i, len(resp.Resources[i].Value), len(want.Value))
		}
	}
}
