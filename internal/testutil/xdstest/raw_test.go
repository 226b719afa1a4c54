package xdstest_test

import (
	"errors"
	"io"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

var node = &core.Node{Id: "raw-node"}

// hashes maps resource name to MessageHash for what the snapshot holds.
func hashes(t *testing.T, res []types.Resource) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	for _, r := range res {
		out[nameOf(t, r)] = xdstest.MessageHash(r)
	}
	return out
}

func nameOf(t *testing.T, m proto.Message) string {
	t.Helper()
	f := m.ProtoReflect().Descriptor().Fields().ByNumber(1)
	return m.ProtoReflect().Get(f).String()
}

func unpack(t *testing.T, a *anypb.Any) proto.Message {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("unpack %s: %v", a.GetTypeUrl(), err)
	}
	return m
}

// TestRawStreams proves SotW and Delta ADS streams and a per-type service
// all deliver exactly the snapshot's resources, compared by MessageHash.
func TestRawStreams(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "workload", []string{"workload"}, nil, false)
	res := xdsconfig.ResolverResources("svc", "127.0.0.1:8080")
	res[resource.SecretType] = []types.Resource{xdsconfig.Secret("default", kp.CertPEM, kp.KeyPEM)}
	cp.SetSnapshot(t, node.Id, "v1", res)
	cc := xdstest.DialRaw(t, cp.Target())
	_, rName, cName := xdsconfig.ResolverNames("svc")
	names := map[string][]string{
		resource.ListenerType: nil, // wildcard, as Envoy asks for LDS and CDS
		resource.ClusterType:  nil,
		resource.RouteType:    {rName},
		resource.EndpointType: {cName},
		resource.SecretType:   {"default"},
	}

	t.Run("sotw", func(t *testing.T) {
		s := xdstest.OpenSotW(t, t.Context(), cc)
		for typ, want := range names {
			if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: typ, ResourceNames: want}); err != nil {
				t.Fatal(err)
			}
			resp := xdstest.RecvWithin(t, waitTime, s.Recv)
			if resp.GetTypeUrl() != typ || resp.GetVersionInfo() != "v1" || resp.GetNonce() == "" {
				t.Fatalf("asked %s, got type %s version %q nonce %q", typ, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce())
			}
			want := hashes(t, res[typ])
			for _, a := range resp.GetResources() {
				m := unpack(t, a)
				if h, ok := want[nameOf(t, m)]; !ok || h != xdstest.MessageHash(m) {
					t.Errorf("%s %q differs from the snapshot", typ, nameOf(t, m))
				}
				delete(want, nameOf(t, m))
			}
			if len(want) != 0 {
				t.Errorf("%s: missing %v", typ, want)
			}
			// ACK so the server does not treat the next type as pending.
			if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: names[typ], VersionInfo: "v1", ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("delta", func(t *testing.T) {
		s := xdstest.OpenDelta(t, t.Context(), cc)
		for typ, sub := range names {
			if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, ResourceNamesSubscribe: sub}); err != nil {
				t.Fatal(err)
			}
			resp := xdstest.RecvWithin(t, waitTime, s.Recv)
			if resp.GetTypeUrl() != typ || resp.GetNonce() == "" {
				t.Fatalf("asked %s, got type %s nonce %q", typ, resp.GetTypeUrl(), resp.GetNonce())
			}
			want := hashes(t, res[typ])
			for _, r := range resp.GetResources() {
				m := unpack(t, r.GetResource())
				if r.GetName() != nameOf(t, m) || want[r.GetName()] != xdstest.MessageHash(m) {
					t.Errorf("%s %q differs from the snapshot", typ, r.GetName())
				}
				delete(want, r.GetName())
			}
			if len(want) != 0 {
				t.Errorf("%s: missing %v", typ, want)
			}
			if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResponseNonce: resp.GetNonce()}); err != nil {
				t.Fatal(err)
			}
		}
		cp.WaitForDeltaRequest(t, waitTime, func(r *discovery.DeltaDiscoveryRequest) bool {
			return r.GetTypeUrl() == resource.SecretType && r.GetResponseNonce() != ""
		})
	})

	t.Run("per-type", func(t *testing.T) {
		cds, err := clusterservice.NewClusterDiscoveryServiceClient(cc).StreamClusters(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := cds.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		resp := xdstest.RecvWithin(t, waitTime, cds.Recv)
		if len(resp.GetResources()) != 1 || xdstest.MessageHash(unpack(t, resp.GetResources()[0])) != xdstest.MessageHash(res[resource.ClusterType][0]) {
			t.Errorf("CDS stream returned %d clusters, want the snapshot's one", len(resp.GetResources()))
		}

		sds, err := secretservice.NewSecretDiscoveryServiceClient(cc).DeltaSecrets(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := sds.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.SecretType, ResourceNamesSubscribe: []string{"default"}}); err != nil {
			t.Fatal(err)
		}
		dresp := xdstest.RecvWithin(t, waitTime, sds.Recv)
		if len(dresp.GetResources()) != 1 || dresp.GetResources()[0].GetName() != "default" {
			t.Errorf("delta SDS returned %v, want secret default", dresp.GetResources())
		}
	})
}

// TestLargeResponse proves Clusters pads to the requested size and that a
// 20 MB CDS response crosses a DialRaw connection.
func TestLargeResponse(t *testing.T) {
	leakcheck.Check(t)
	clusters := xdsconfig.Clusters(1000, 20_000)
	for _, c := range clusters[:3] {
		if n := proto.Size(c); n < 19_998 || n > 20_002 {
			t.Errorf("cluster %s is %d bytes, want about 20000", c.(*clusterv3.Cluster).GetName(), n)
		}
	}
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	cp.SetSnapshot(t, node.Id, "big", map[resource.Type][]types.Resource{resource.ClusterType: clusters})
	s := xdstest.OpenSotW(t, t.Context(), xdstest.DialRaw(t, cp.Target()))
	if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	// Building, marshalling and moving 20 MB under the race detector takes
	// seconds on an idle machine and several times that on a loaded one: the
	// bound only catches a hang, the test is about the size crossing.
	resp := xdstest.RecvWithin(t, hangTime, s.Recv)
	if got := len(resp.GetResources()); got != 1000 {
		t.Fatalf("got %d clusters, want 1000", got)
	}
	size := proto.Size(resp)
	if size < 20_000_000 {
		t.Errorf("response is %d bytes, want over 20 MB", size)
	}
	t.Logf("CDS response: %d bytes", size)
}

// TestStop proves Stop kills an open stream the way a crashed control plane
// would: the client sees Unavailable, not a clean end of stream.
func TestStop(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	cp.SetSnapshot(t, node.Id, "v1", xdsconfig.ResolverResources("svc", "127.0.0.1:8080"))
	s := xdstest.OpenSotW(t, t.Context(), xdstest.DialRaw(t, cp.Target()))
	if err := s.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	xdstest.RecvWithin(t, waitTime, s.Recv)
	cp.Stop()
	_, err := s.Recv()
	if errors.Is(err, io.EOF) || status.Code(err) != codes.Unavailable {
		t.Errorf("Recv after Stop: %v, want Unavailable", err)
	}
	cp.Stop() // idempotent; cleanup calls it again
}
