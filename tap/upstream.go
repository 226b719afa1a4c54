package tap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adstap/adstap/codec"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"
)

// errConnClosed is returned for a stream that arrives after its downstream
// connection has gone.
var errConnClosed = errors.New("downstream connection closed")

// downstreamConn is one client connection to the tap. It owns the one upstream
// connection that serves all its streams, so the control plane sees each
// client on a connection of its own, as it would without the tap.
type downstreamConn struct {
	id  uint64
	srv *Server

	mu          sync.Mutex
	cc          *grpc.ClientConn
	closed      bool
	lastConnect *codec.UpstreamConnect
	streams     int // open now
}

// openStream counts a new stream of the connection, unless it already
// carries max.
func (d *downstreamConn) openStream(max int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.streams >= max {
		return false
	}
	d.streams++
	return true
}

func (d *downstreamConn) closeStream() {
	d.mu.Lock()
	d.streams--
	d.mu.Unlock()
}

// connect returns how the connection's upstream last came up, or nil.
func (d *downstreamConn) connect() *codec.UpstreamConnect {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastConnect
}

// upstream returns the connection's upstream, creating it on first use; the
// first stream's user agent is the one the control plane will see.
func (d *downstreamConn) upstream(userAgent string) (*grpc.ClientConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errConnClosed
	}
	if d.cc != nil {
		return d.cc, nil
	}
	cc, err := d.srv.newUpstreamConn(d, userAgent)
	if err != nil {
		return nil, err
	}
	d.cc = cc
	return cc, nil
}

func (d *downstreamConn) close() {
	d.mu.Lock()
	cc := d.cc
	d.closed = true
	d.cc = nil
	d.mu.Unlock()
	if cc != nil {
		cc.Close()
	}
}

func (s *Server) newUpstreamConn(d *downstreamConn, userAgent string) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if s.cfg.UpstreamTLS != nil {
		creds = credentials.NewTLS(s.cfg.UpstreamTLS)
	}
	target := "passthrough:///" + s.upstream.Addr
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(timedCreds{TransportCredentials: creds, conn: d}),
		grpc.WithContextDialer(d.dialer()),
		grpc.WithStatsHandler(upstreamStats{}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(s.cfg.MaxMessageSize),
			grpc.MaxCallSendMsgSize(s.cfg.MaxMessageSize),
		),
		// A retried stream would replay requests the control plane has
		// already seen; the client retries on its own, as it would without us.
		grpc.WithDisableRetry(),
		// gRPC's default backoff grows to two minutes; a control plane that
		// comes back must be found again as quickly as the client would.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 20 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                s.cfg.UpstreamKeepalive,
			Timeout:             10 * time.Second,
			PermitWithoutStream: true,
		}),
	}
	if userAgent != "" {
		opts = append(opts, grpc.WithUserAgent(userAgent))
	}
	if s.upstream.Network == "unix" {
		target = "passthrough:///localhost"
		opts = append(opts, grpc.WithAuthority("localhost"))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating upstream connection to %s: %w", s.upstream, err)
	}
	return cc, nil
}

// callState records what the upstream sent on one stream, as seen by gRPC's
// stats hooks: a status that came in trailers is the control plane's own and
// goes back untouched; a failure without one is the tap's to explain.
type callState struct {
	gotTrailer atomic.Bool
}

type callStateKey struct{}

func withCallState(ctx context.Context, c *callState) context.Context {
	return context.WithValue(ctx, callStateKey{}, c)
}

type upstreamStats struct{}

func (upstreamStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (upstreamStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (upstreamStats) HandleConn(context.Context, stats.ConnStats) {}

func (upstreamStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	c, _ := ctx.Value(callStateKey{}).(*callState)
	if c == nil {
		return
	}
	if _, ok := st.(*stats.InTrailer); ok {
		c.gotTrailer.Store(true)
	}
}

// downstreamStats gives every downstream connection its own upstream and
// closes that upstream when the connection ends.
type downstreamStats struct{ srv *Server }

type downstreamConnKey struct{}

func (h downstreamStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	d := &downstreamConn{id: h.srv.nextConn.Add(1), srv: h.srv}
	h.srv.mu.Lock()
	h.srv.conns[d] = struct{}{}
	h.srv.mu.Unlock()
	return context.WithValue(ctx, downstreamConnKey{}, d)
}

func (h downstreamStats) HandleConn(ctx context.Context, st stats.ConnStats) {
	if _, ok := st.(*stats.ConnEnd); !ok {
		return
	}
	d, _ := ctx.Value(downstreamConnKey{}).(*downstreamConn)
	if d == nil {
		return
	}
	h.srv.mu.Lock()
	delete(h.srv.conns, d)
	h.srv.mu.Unlock()
	d.close()
}

func (downstreamStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (downstreamStats) HandleRPC(context.Context, stats.RPCStats)                       {}
