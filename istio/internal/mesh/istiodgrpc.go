package mesh

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	istiogrpc "istio.io/istio/pilot/pkg/grpc"
	istiokeepalive "istio.io/istio/pkg/keepalive"
)

// IstiodServer is the engine served as istiod serves it: a gRPC server with
// istiod's own options (pilot/pkg/grpc.ServerOptions), whose keepalive
// enforcement answers a client that pings too often with GOAWAY
// too_many_pings; the engine's own server keeps gRPC's defaults. It counts
// the pings its clients send.
type IstiodServer struct {
	// Addr is where it listens (host:port).
	Addr  string
	pings atomic.Int64
	mu    sync.Mutex
	conns int
	gone  int
}

// ServeAsIstiod serves the engine's ADS on a loopback port with istiod's
// gRPC server options for keepalive; it stops when the test ends.
func (e *Engine) ServeAsIstiod(t *testing.T, keepalive *istiokeepalive.Options) *IstiodServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &IstiodServer{Addr: lis.Addr().String()}
	srv := grpc.NewServer(istiogrpc.ServerOptions(keepalive, func(int64) {})...)
	e.Discovery.Register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(&pingListener{Listener: lis, s: s})
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return s
}

// ClientPings is the number of pings (not ping ACKs) its clients sent.
func (s *IstiodServer) ClientPings() int64 { return s.pings.Load() }

// Connections is the number of connections accepted and of those closed.
func (s *IstiodServer) Connections() (accepted, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, s.gone
}

type pingListener struct {
	net.Listener
	s *IstiodServer
}

func (l *pingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.mu.Lock()
	l.s.conns++
	l.s.mu.Unlock()
	return &pingConn{Conn: c, s: l.s, skip: len(clientPreface)}, nil
}

const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// pingConn reads the HTTP/2 frames a client sends, as the server reads
// them, and counts its pings: a frame header is 9 bytes (length 3, type 1,
// flags 1, stream 4); a PING is type 6, an ACK has flag 1.
type pingConn struct {
	net.Conn
	s      *IstiodServer
	skip   int // bytes of the preface or of a frame's payload still to pass
	header []byte
	once   sync.Once
}

func (c *pingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.scan(b[:n])
	return n, err
}

func (c *pingConn) scan(b []byte) {
	for len(b) > 0 {
		if c.skip > 0 {
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
			continue
		}
		k := min(9-len(c.header), len(b))
		c.header = append(c.header, b[:k]...)
		b = b[k:]
		if len(c.header) < 9 {
			return
		}
		h := c.header
		c.header = c.header[:0]
		if h[3] == 6 && h[4]&1 == 0 {
			c.s.pings.Add(1)
		}
		c.skip = int(binary.BigEndian.Uint32(append([]byte{0}, h[:3]...)))
	}
}

func (c *pingConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		c.s.gone++
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}
