package tap_test

import (
	"context"
	"crypto/sha256"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/tap"
)

const adsMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// rawUpstream is a control plane stand-in that speaks raw frames, so tests
// can send anything (garbage included) and check the bytes that arrive.
type rawUpstream struct {
	addr tap.Address
	srv  *grpc.Server
}

func startRawUpstream(t testing.TB, lis net.Listener, handler grpc.StreamHandler, opts ...grpc.ServerOption) *rawUpstream {
	t.Helper()
	opts = append([]grpc.ServerOption{
		grpc.UnknownServiceHandler(handler),
		grpc.ForceServerCodecV2(codec.Passthrough{}),
		grpc.MaxRecvMsgSize(1 << 30), grpc.MaxSendMsgSize(1 << 30),
	}, opts...)
	srv := grpc.NewServer(opts...)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return &rawUpstream{addr: addrOf(lis), srv: srv}
}

func addrOf(lis net.Listener) tap.Address {
	a := lis.Addr()
	return tap.Address{Network: a.Network(), Addr: a.String()}
}

func listenTCP(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return lis
}

// startTap runs a tap in front of cfg.Upstream and returns its listener address.
func startTap(t testing.TB, cfg tap.Config, lis net.Listener) (*tap.Server, tap.Address) {
	t.Helper()
	if lis == nil {
		lis = listenTCP(t)
	}
	srv, err := tap.New(cfg)
	if err != nil {
		t.Fatalf("tap.New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, addrOf(lis)
}

func dial(t testing.TB, addr tap.Address, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	target := "passthrough:///" + addr.Addr
	if addr.Network == "unix" {
		target = "unix://" + addr.Addr
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)),
	}, opts...)
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", target, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func openRaw(t testing.TB, ctx context.Context, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) grpc.ClientStream {
	t.Helper()
	opts = append(opts, grpc.ForceCodecV2(codec.Passthrough{}))
	s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, opts...)
	if err != nil {
		t.Fatalf("NewStream(%s): %v", method, err)
	}
	return s
}

func frameOf(b []byte) *codec.Frame {
	return &codec.Frame{Data: mem.BufferSlice{mem.SliceBuffer(b)}}
}

// recvBytes reads one raw frame and copies its bytes out.
func recvBytes(s interface{ RecvMsg(any) error }) ([]byte, error) {
	f := &codec.Frame{}
	if err := s.RecvMsg(f); err != nil {
		return nil, err
	}
	b := f.Data.Materialize()
	f.Data.Free()
	return b, nil
}

func sendBytes(s interface{ SendMsg(any) error }, b []byte) error {
	return s.SendMsg(frameOf(b))
}

// digestLog collects sha256 digests of frames from several goroutines.
type digestLog struct {
	mu      sync.Mutex
	digests [][32]byte
}

func (d *digestLog) add(b []byte) {
	sum := sha256.Sum256(b)
	d.mu.Lock()
	d.digests = append(d.digests, sum)
	d.mu.Unlock()
}

func (d *digestLog) get() [][32]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][32]byte(nil), d.digests...)
}
