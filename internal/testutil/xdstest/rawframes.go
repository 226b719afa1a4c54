package xdstest

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/tap"
)

// ADSMethod is the SotW ADS method, the one Envoy and grpc-go open.
const ADSMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// MaxRawMessage is the message size limit of the raw peers: larger than any
// test sends, so that only the tap's own limit could ever apply.
const MaxRawMessage = 1 << 30

// RawUpstream is a control plane stand-in speaking raw frames through the
// pass-through codec, so a test sends exactly the bytes it chose and sees
// exactly the bytes that arrived. It remembers its connections so that one
// can be cut (KillConnOf) as a dying control plane would cut it.
type RawUpstream struct {
	Addr tap.Address
	srv  *grpc.Server
	lis  *connListener
	done chan struct{}
	once sync.Once
}

// StartRawUpstream serves handler for every method on a free loopback port.
// It stops at cleanup, after the handlers returned. opts add to (and may
// override) the server's options, e.g. grpc.Creds.
func StartRawUpstream(t testing.TB, handler grpc.StreamHandler, opts ...grpc.ServerOption) *RawUpstream {
	t.Helper()
	return ServeRawUpstream(t, ListenTCP(t), handler, opts...)
}

// ServeRawUpstream is StartRawUpstream on a listener of the caller's.
func ServeRawUpstream(t testing.TB, lis net.Listener, handler grpc.StreamHandler, opts ...grpc.ServerOption) *RawUpstream {
	t.Helper()
	u := NewRawUpstream(lis, handler, opts...)
	t.Cleanup(u.Stop)
	return u
}

// NewRawUpstream serves handler on lis until Stop, for a program (the
// benchmark) rather than a test.
func NewRawUpstream(lis net.Listener, handler grpc.StreamHandler, opts ...grpc.ServerOption) *RawUpstream {
	cl := &connListener{Listener: lis, conns: map[string]net.Conn{}}
	opts = append([]grpc.ServerOption{
		grpc.UnknownServiceHandler(handler),
		grpc.ForceServerCodecV2(codec.Passthrough{}),
		grpc.MaxRecvMsgSize(MaxRawMessage), grpc.MaxSendMsgSize(MaxRawMessage),
		grpc.WaitForHandlers(true),
	}, opts...)
	u := &RawUpstream{
		Addr: AddressOf(lis),
		srv:  grpc.NewServer(opts...),
		lis:  cl,
		done: make(chan struct{}),
	}
	go func() {
		defer close(u.done)
		u.srv.Serve(cl)
	}()
	return u
}

// Stop ends every stream and connection at once and waits for the handlers.
func (u *RawUpstream) Stop() {
	u.once.Do(func() {
		u.srv.Stop()
		<-u.done
	})
}

// KillConnOf closes, without any HTTP/2 goodbye, the TCP connection that
// carries the stream whose server context is ctx: what the tap sees when the
// control plane's process or host dies.
func (u *RawUpstream) KillConnOf(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	u.lis.mu.Lock()
	c := u.lis.conns[p.Addr.String()]
	u.lis.mu.Unlock()
	if c == nil {
		return false
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset, as from a dead host's kernel, not a FIN
	}
	c.Close()
	return true
}

// connListener remembers the connections it accepted, by remote address.
type connListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]net.Conn
}

func (l *connListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = c
	l.mu.Unlock()
	return &forgetConn{Conn: c, l: l}, nil
}

type forgetConn struct {
	net.Conn
	l    *connListener
	once sync.Once
}

func (c *forgetConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c.RemoteAddr().String())
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// AddressOf is the tap.Address of a listener.
func AddressOf(lis net.Listener) tap.Address {
	a := lis.Addr()
	return tap.Address{Network: a.Network(), Addr: a.String()}
}

// Dial connects a raw client to addr (a tap, a TCP or a Unix socket),
// insecure unless opts say otherwise. The caller closes it; DialRaw is the
// form that closes at cleanup.
func Dial(addr tap.Address, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRawMessage), grpc.MaxCallSendMsgSize(MaxRawMessage)),
	}, opts...)
	target := "passthrough:///" + addr.Addr
	if addr.Network == "unix" {
		target = "unix://" + addr.Addr
	}
	return grpc.NewClient(target, opts...)
}

// OpenRaw opens a bidirectional stream of method that sends and receives raw
// frames.
func OpenRaw(ctx context.Context, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	opts = append(opts, grpc.ForceCodecV2(codec.Passthrough{}))
	return cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, opts...)
}

// MustOpenRaw is OpenRaw for the test's own goroutine: it fails the test
// rather than returning an error.
func MustOpenRaw(t testing.TB, ctx context.Context, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) grpc.ClientStream {
	t.Helper()
	s, err := OpenRaw(ctx, cc, method, opts...)
	if err != nil {
		t.Fatalf("xdstest: open %s: %v", method, err)
	}
	return s
}

// Frame is b as one message of the pass-through codec.
func Frame(b []byte) *codec.RawMessage {
	return &codec.RawMessage{Data: mem.BufferSlice{mem.SliceBuffer(b)}}
}

// Send sends b as one frame.
func Send(s interface{ SendMsg(any) error }, b []byte) error { return s.SendMsg(Frame(b)) }

// Recv receives one frame and copies its bytes out.
func Recv(s interface{ RecvMsg(any) error }) ([]byte, error) {
	f := &codec.RawMessage{}
	if err := s.RecvMsg(f); err != nil {
		return nil, err
	}
	b := f.Data.Materialize()
	f.Data.Free()
	return b, nil
}

// MustDial is Dial for the test's own goroutine: it fails the test rather
// than returning an error, and closes the connection at cleanup.
func MustDial(t testing.TB, addr tap.Address, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := Dial(addr, opts...)
	if err != nil {
		t.Fatalf("xdstest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
