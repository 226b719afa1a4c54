package benchmark

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"

	"github.com/adstap/adstap/codec"
)

// passRelay is the honest floor of a relay that keeps the control plane's
// view of each client: a plain pass-through relay as one would write it with
// grpc-go, an UnknownServiceHandler with a raw codec that keeps each message
// as the buffers it arrived in, and one upstream connection per client
// connection. It observes nothing and tunes nothing: gRPC's default buffer
// and window sizes, no keepalive of its own towards the upstream, Go's
// default collector. Only the message size limits are raised, as any xDS
// relay must (real CDS pushes exceed gRPC's 4 MiB).
type passRelay struct {
	upstream string
	// pumps counts the request pumps, which may outlive their handler by a moment.
	pumps sync.WaitGroup
}

func servePassRelay(lis net.Listener, upstream string) (func() error, error) {
	r := &passRelay{upstream: upstream}
	srv := grpc.NewServer(
		grpc.UnknownServiceHandler(r.handle),
		grpc.ForceServerCodecV2(codec.Passthrough{}),
		grpc.StatsHandler(relayConns{r}),
		grpc.MaxRecvMsgSize(maxMessage), grpc.MaxSendMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	)
	return serveRelay(srv, lis, &r.pumps), nil
}

// relayConn is one client connection and its upstream connection, dialed
// for the connection's first stream and closed when the connection ends.
type relayConn struct {
	mu     sync.Mutex
	cc     *grpc.ClientConn
	closed bool
}

func (c *relayConn) upstream(r *passRelay) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, net.ErrClosed
	}
	if c.cc == nil {
		cc, err := grpc.NewClient("passthrough:///"+r.upstream,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		)
		if err != nil {
			return nil, err
		}
		c.cc = cc
	}
	return c.cc, nil
}

func (c *relayConn) close() {
	c.mu.Lock()
	cc := c.cc
	c.cc, c.closed = nil, true
	c.mu.Unlock()
	if cc != nil {
		cc.Close()
	}
}

// relayConns ties an upstream connection to each client connection.
type relayConns struct{ r *passRelay }

type relayConnKey struct{}

func (relayConns) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, relayConnKey{}, &relayConn{})
}

func (relayConns) HandleConn(ctx context.Context, st stats.ConnStats) {
	if _, ok := st.(*stats.ConnEnd); ok {
		if c, _ := ctx.Value(relayConnKey{}).(*relayConn); c != nil {
			c.close()
		}
	}
}

func (relayConns) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (relayConns) HandleRPC(context.Context, stats.RPCStats)                       {}

func (r *passRelay) handle(_ any, down grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(down)
	conn, _ := down.Context().Value(relayConnKey{}).(*relayConn)
	if conn == nil {
		return net.ErrClosed
	}
	cc, err := conn.upstream(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(upstreamContext(down.Context()))
	defer cancel()
	up, err := cc.NewStream(ctx, bidi, method, grpc.ForceCodecV2(codec.Passthrough{}))
	if err != nil {
		return err
	}
	r.pumps.Add(1)
	go func() {
		defer r.pumps.Done()
		for {
			f := &codec.RawMessage{}
			if err := down.RecvMsg(f); err != nil {
				if isEOF(err) {
					up.CloseSend()
				}
				return
			}
			if err := up.SendMsg(f); err != nil {
				f.Data.Free()
				return
			}
		}
	}()
	for {
		f := &codec.RawMessage{}
		if err := up.RecvMsg(f); err != nil {
			down.SetTrailer(up.Trailer())
			if isEOF(err) {
				return nil
			}
			return err
		}
		if err := down.SendMsg(f); err != nil {
			f.Data.Free()
			return err
		}
	}
}
