package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// lastErrorSource is a type's last_error_source on /debug/streams.
type lastErrorSource struct {
	Resources []struct {
		Name        string `json:"name"`
		IstioConfig []struct {
			Kind, Namespace, Name, Path, Kubectl string
		} `json:"istio_config"`
	} `json:"resources"`
	Summary string `json:"summary"`
	Error   string `json:"error"`
}

// cdsSource reads the CDS state and last_error_source of node's stream.
func cdsSource(t *testing.T, admin, node string) (state string, src *lastErrorSource) {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/debug/streams?node=" + node)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page struct {
		Streams []struct {
			Types map[string]struct {
				State           string           `json:"state"`
				LastErrorSource *lastErrorSource `json:"last_error_source"`
			} `json:"types"`
		} `json:"streams"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatalf("decoding /debug/streams: %v", err)
	}
	for _, s := range page.Streams {
		if ts, ok := s.Types[resource.ClusterType]; ok {
			return ts.State, ts.LastErrorSource
		}
	}
	return "", nil
}

// TestNACKNamesTheDestinationRule: grpc-go's xDS client rejects a cluster
// with lb_policy MAGLEV that carries the metadata istiod stamps on a cluster
// a DestinationRule shaped. The live log's NACK line, /debug/streams and the
// metrics name the DestinationRule; a cluster without that metadata (plain
// go-control-plane) says it has none.
func TestNACKNamesTheDestinationRule(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name        string
		stamp       bool
		wantSummary string
		wantKubectl string
	}{
		{
			name: "stamped by istiod", stamp: true,
			wantSummary: "from DestinationRule shop/greeter-maglev",
			wantKubectl: "kubectl get destinationrule -n shop greeter-maglev",
		},
		{
			name:        "go-control-plane, no Istio metadata",
			wantSummary: "no Istio config recorded in cluster-greeter",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			backend := xdstest.StartBackend(t)
			cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
			const node = "proxyless~10.0.0.3~client.shop~shop.svc.cluster.local"
			var log syncbuf.Buffer
			tapAddr, admin := startObservedTap(t, cp.Addr(), &log)

			res := xdsconfig.ResolverResourcesMaglev("greeter", backend)
			if tt.stamp {
				res[resource.ClusterType][0].(*clusterv3.Cluster).Metadata = xdsconfig.IstioConfig("destination-rule", "shop", "greeter-maglev")
			}
			cp.SetSnapshot(t, node, "2026-11-30T09:00:00Z/1", res)
			cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tapAddr, node)))
			cc.Connect()
			defer cc.Close()

			var src *lastErrorSource
			xdstest.Eventually(t, "CDS NACKED with its source", func() bool {
				var state string
				state, src = cdsSource(t, admin, node)
				return state == "NACKED" && src != nil
			})
			if src.Summary != tt.wantSummary {
				t.Errorf("last_error_source.summary = %q, want %q", src.Summary, tt.wantSummary)
			}
			if len(src.Resources) != 1 || src.Resources[0].Name != "cluster-greeter" {
				t.Fatalf("last_error_source.resources = %+v, want cluster-greeter alone", src.Resources)
			}
			objs := src.Resources[0].IstioConfig
			switch {
			case tt.wantKubectl == "" && len(objs) != 0:
				t.Errorf("a cluster without Istio metadata names %+v", objs)
			case tt.wantKubectl != "" && (len(objs) != 1 || objs[0].Kubectl != tt.wantKubectl):
				t.Errorf("istio_config = %+v, want one object shown by %q", objs, tt.wantKubectl)
			}

			// The live log (JSON here) says it on the NACK line itself.
			xdstest.Eventually(t, "CDS NACKED with its source", func() bool { return strings.Contains(log.String(), " — "+tt.wantSummary) })
			for _, line := range strings.Split(log.String(), "\n") {
				if strings.Contains(line, `"result":"nack"`) && !strings.Contains(line, "MAGLEV") {
					t.Errorf("a NACK line without grpc-go's message: %s", line)
				}
			}
			if v := value(t, scrape(t, admin), "adstap_nack_not_kept_total"); v != 0 {
				t.Errorf("adstap_nack_not_kept_total = %v, want 0", v)
			}
		})
	}
}
