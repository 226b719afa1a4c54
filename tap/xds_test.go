package tap_test

import (
	"context"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
)

func TestGRPCXDSClientResolvesThroughTheTap(t *testing.T) {
	leakcheck.Check(t)
	backend := xdstest.StartBackend(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}}, nil)
	const node = "proxyless~10.0.0.7~app-1.default~default.svc.cluster.local"
	cp.SetSnapshot(t, node, "2026-11-30T09:00:00Z/1", xdsconfig.ResolverResources("greeter", backend))

	cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, addr.Addr, node)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("EmptyCall via xds:///greeter resolved through the tap: %v", err)
	}
	// Every type was ACKed through the tap: the control plane saw a request
	// with each version's nonce and no error.
	for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
		cp.WaitForRequest(t, 10*time.Second, func(r *discovery.DiscoveryRequest) bool {
			return r.GetTypeUrl() == typ && r.GetVersionInfo() == "2026-11-30T09:00:00Z/1" && r.GetResponseNonce() != "" && r.GetErrorDetail() == nil
		})
	}
}

// wireLog records the hash of every message each side saw, in order.
type wireLog struct {
	mu                sync.Mutex
	reqSent, reqGot   [][32]byte
	respSent, respGot [][32]byte
}

func (w *wireLog) record(list *[][32]byte, h [32]byte) {
	w.mu.Lock()
	*list = append(*list, h)
	w.mu.Unlock()
}

func (w *wireLog) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.reqSent) == 0 || len(w.respSent) == 0 {
		t.Fatalf("nothing exchanged: %d requests, %d responses", len(w.reqSent), len(w.respSent))
	}
	if diff := cmp.Diff(w.reqSent, w.reqGot); diff != "" {
		t.Errorf("requests at the control plane differ from those the client sent (-client +server):\n%s", diff)
	}
	if diff := cmp.Diff(w.respSent, w.respGot); diff != "" {
		t.Errorf("responses at the client differ from those the control plane sent (-server +client):\n%s", diff)
	}
}

func TestRawSotWAndDeltaStreamsArriveIntact(t *testing.T) {
	leakcheck.Check(t)
	// One log per stream: order is per stream, and the two streams run at once.
	var sotw, delta wireLog
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), xdstest.WithCallbacks(server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			sotw.record(&sotw.reqGot, xdstest.MessageHash(r))
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			sotw.record(&sotw.respSent, xdstest.MessageHash(r))
		},
		StreamDeltaRequestFunc: func(_ int64, r *discovery.DeltaDiscoveryRequest) error {
			delta.record(&delta.reqGot, xdstest.MessageHash(r))
			return nil
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			delta.record(&delta.respSent, xdstest.MessageHash(r))
		},
	}))
	_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}}, nil)
	const node = "sidecar~10.0.0.1~app.default~default.svc.cluster.local"
	var names []string
	snapshot := func(port uint32) map[resource.Type][]types.Resource {
		var eps []types.Resource
		clusters := xdsconfig.Clusters(50, 2000)
		names = names[:0]
		for _, c := range clusters {
			name := c.(interface{ GetName() string }).GetName()
			names = append(names, name)
			eps = append(eps, xdsconfig.Endpoint(name, "10.1.0.1", port))
		}
		return map[resource.Type][]types.Resource{resource.ClusterType: clusters, resource.EndpointType: eps}
	}
	cp.SetSnapshot(t, node, "v1", snapshot(8080))
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The streams live as long as the whole test: cancelling one may drop
	// the ACK still in flight on it, which is gRPC's rule, not the tap's.
	parent := t
	streamNode := &core.Node{Id: node, Cluster: "app"}

	t.Run("sotw", func(t *testing.T) {
		w := &sotw
		s := xdstest.OpenSotW(parent, ctx, cc)
		send := func(r *discovery.DiscoveryRequest) {
			t.Helper()
			w.record(&w.reqSent, xdstest.MessageHash(asServerSees(r, r.Node == nil, func(c *discovery.DiscoveryRequest) { c.Node = streamNode })))
			if err := s.Send(r); err != nil {
				t.Fatal(err)
			}
		}
		recv := func() *discovery.DiscoveryResponse {
			t.Helper()
			r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
			w.record(&w.respGot, xdstest.MessageHash(r))
			return r
		}
		send(&discovery.DiscoveryRequest{Node: streamNode, TypeUrl: resource.ClusterType})
		cds := recv()
		send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.VersionInfo, ResponseNonce: cds.Nonce})
		send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names})
		eds := recv()
		send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names, VersionInfo: eds.VersionInfo, ResponseNonce: eds.Nonce})
		cp.SetSnapshot(t, node, "v2", snapshot(9090))
		for range 2 { // CDS and EDS, in the order the server chooses
			r := recv()
			if r.VersionInfo != "v2" {
				t.Errorf("second push: %s version %q, want v2", r.TypeUrl, r.VersionInfo)
			}
			ack := &discovery.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}
			if r.TypeUrl == resource.EndpointType {
				ack.ResourceNames = names
			}
			send(ack)
		}
	})
	t.Run("delta", func(t *testing.T) {
		w := &delta
		s := xdstest.OpenDelta(parent, ctx, cc)
		send := func(r *discovery.DeltaDiscoveryRequest) {
			t.Helper()
			// go-control-plane's Delta server calls back before it fills in the node.
			w.record(&w.reqSent, xdstest.MessageHash(r))
			if err := s.Send(r); err != nil {
				t.Fatal(err)
			}
		}
		send(&discovery.DeltaDiscoveryRequest{Node: streamNode, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*"}})
		r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
		w.record(&w.respGot, xdstest.MessageHash(r))
		if len(r.Resources) != 50 {
			t.Errorf("delta CDS carried %d resources, want 50", len(r.Resources))
		}
		send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.Nonce})
	})
	for _, w := range []*wireLog{&sotw, &delta} {
		// Wait for the last ACKs to reach the control plane before comparing.
		xdstest.Eventually(t, "the last ACKs at the control plane", func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.reqGot) == len(w.reqSent) && len(w.respGot) <= len(w.respSent)
		})
		w.check(t)
	}
}

// asServerSees is r as go-control-plane's SotW server hands it to its
// callbacks: it fills in the stream's node on every request after the first.
func asServerSees[M proto.Message](r M, fill bool, set func(M)) M {
	c := proto.Clone(r).(M)
	if fill {
		set(c)
	}
	return c
}

func TestPerTypeClusterDiscoveryStream(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}}, nil)
	cp.SetSnapshot(t, "n1", "7", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(3, 0)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := clusterservice.NewClusterDiscoveryServiceClient(xdstest.MustDial(t, addr)).StreamClusters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "n1"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
	if r.VersionInfo != "7" || len(r.Resources) != 3 {
		t.Errorf("StreamClusters through the tap: version %q with %d clusters, want \"7\" with 3", r.VersionInfo, len(r.Resources))
	}
}

func TestTwentyMegabyteCDSPushFromGoControlPlane(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}}, nil)
	cp.SetSnapshot(t, "big", "1", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1000, 20_000)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer x")
	s := xdstest.OpenSotW(t, ctx, xdstest.MustDial(t, addr))
	if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "big"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := xdstest.RecvWithin(t, 30*time.Second, s.Recv)
	size := 0
	for _, a := range r.Resources {
		size += len(a.Value)
	}
	if len(r.Resources) != 1000 || size < 20_000_000 {
		t.Errorf("got %d clusters totalling %d bytes, want 1000 totalling over 20 MB", len(r.Resources), size)
	}
}
