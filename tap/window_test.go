package tap_test

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// The clients' windows are fixed: gRPC's window estimate would ping the
// client at nearly every ACK of a stream that is pushed now and then, a
// frame for Envoy to answer and one for the tap to read, each push.
func TestTapDoesNotPingTheClientAtEachACK(t *testing.T) {
	leakcheck.Check(t)
	var downstream pingCount
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}}, nil)
	cc := xdstest.DialRaw(t, addr.Addr, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
		if err != nil {
			return nil, err
		}
		return &pingCountingConn{Conn: c, pings: &downstream}, nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only a hang reaches it
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &core.Node{Id: "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local"}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	const pushes = 5
	for v := 1; v <= pushes; v++ {
		version := strconv.Itoa(v)
		cp.SetSnapshot(t, node.Id, version, map[resource.Type][]types.Resource{
			resource.ClusterType: {&clusterv3.Cluster{Name: "outbound|80||app-" + version + ".default.svc.cluster.local"}},
		})
		resp, err := stream.Recv()
		for err == nil && resp.GetVersionInfo() != version {
			resp, err = stream.Recv()
		}
		if err != nil {
			t.Fatalf("push %s: %v", version, err)
		}
		if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, VersionInfo: version, ResponseNonce: resp.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		cp.WaitForRequest(t, time.Minute, func(r *discovery.DiscoveryRequest) bool { return r.GetResponseNonce() == resp.GetNonce() })
	}
	// The client has read every frame the tap wrote it before the last
	// push, the pings its first ACKs would have made among them.
	if got := downstream.pings(); got != 0 {
		t.Errorf("the client got %d pings from the tap over %d pushes and their ACKs, want none", got, pushes)
	}
}

// pingCount counts the HTTP/2 PING frames (not their ACKs) a client's
// connections read.
type pingCount struct {
	mu sync.Mutex
	n  int
}

func (p *pingCount) pings() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// pingCountingConn parses the frames of what it reads, as it reads them.
type pingCountingConn struct {
	net.Conn
	pings *pingCount
	buf   []byte
}

func (c *pingCountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.buf = append(c.buf, p[:n]...)
	for len(c.buf) >= 9 {
		length := int(c.buf[0])<<16 | int(binary.BigEndian.Uint16(c.buf[1:3]))
		if len(c.buf) < 9+length {
			break
		}
		if http2.FrameType(c.buf[3]) == http2.FramePing && http2.Flags(c.buf[4])&http2.FlagPingAck == 0 {
			c.pings.mu.Lock()
			c.pings.n++
			c.pings.mu.Unlock()
		}
		c.buf = c.buf[9+length:]
	}
	return n, err
}
