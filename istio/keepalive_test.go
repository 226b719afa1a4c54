package istio_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	v3 "istio.io/istio/pilot/pkg/xds/v3"
	istiokeepalive "istio.io/istio/pkg/keepalive"
	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/istio/internal/mesh"
)

// istiod takes a ping on a connection without streams for a strike
// (pilot/pkg/grpc.ServerOptions: no PermitWithoutStream), and the third
// strike closes the connection with GOAWAY too_many_pings, after which
// gRPC doubles the client's keepalive for good. The tap keeps its upstream
// connection while its client's connection stays, stream or not, so it
// pings istiod only while a stream is open, as istio-agent does.
func TestTheTapPingsIstiodOnlyWhileAStreamIsOpen(t *testing.T) {
	leak.Check(t)
	if testing.Short() {
		t.Skip("waits out keepalive intervals")
	}
	engine := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: baseConfig, KubernetesObjectString: baseKube})
	// istiod's options with a keepalive of 10 s, gRPC's shortest: it
	// accepts pings 5 s apart while a stream is open.
	ka := istiokeepalive.DefaultOption()
	ka.Time = 10 * time.Second
	istiod := engine.ServeAsIstiod(t, ka)
	const every = 10 * time.Second
	tp := mesh.StartTap(t, mesh.TapOptions{Upstream: istiod.Addr, UpstreamKeepalive: every})

	cc, err := grpc.NewClient(tp.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: mesh.NodeID("pinger", "10.0.0.31"), Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{
		"NAMESPACE":  structpb.NewStringValue(mesh.Namespace),
		"CLUSTER_ID": structpb.NewStringValue(mesh.ClusterID),
	}}}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: v3.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("no CDS push through the tap: %v", err)
	}

	// With the stream open the tap pings istiod (progress: only a hang
	// reaches the bound).
	xdstest.EventuallyWithin(t, time.Minute, "a ping from the tap while its stream is open", func() bool { return istiod.ClientPings() >= 1 })

	cancel()
	xdstest.EventuallyWithin(t, time.Minute, "istiod to see the stream end", func() bool {
		return len(engine.Discovery.AllClients()) == 0
	})
	// The tap's client keeps its connection, and the tap its upstream one.
	// Over three keepalive intervals, enough for istiod to have struck
	// three pings out, no ping comes and the connection stays.
	pings := istiod.ClientPings()
	deadline := time.Now().Add(3*every + every/2)
	for time.Now().Before(deadline) {
		if got := istiod.ClientPings(); got > pings {
			t.Fatalf("the tap pinged istiod %d times on a connection without streams; istiod strikes each and closes the connection at the third", got-pings)
		}
		if accepted, closed := istiod.Connections(); closed > 0 {
			t.Fatalf("istiod's connections: %d accepted, %d closed; want the tap's kept while its client's is", accepted, closed)
		}
		time.Sleep(100 * time.Millisecond) // polling for something that must not happen, over a fixed window
	}
	if accepted, _ := istiod.Connections(); accepted != 1 {
		t.Errorf("istiod accepted %d connections; want the tap's one", accepted)
	}
}
