package tap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"

	"github.com/adstap/adstap/codec"
)

// errConnClosed is returned for a stream that arrives after its downstream
// connection has gone.
var errConnClosed = errors.New("downstream connection closed")

// upstreamConfig is what a downstream connection needs of its tap to open
// its upstream connection and report how it came up. New sets it once, and
// every connection shares it.
type upstreamConfig struct {
	addr           Address
	tls            *tls.Config // nil: plaintext
	maxMessageSize int
	keepalive      time.Duration
	// report queues how an upstream connection came up for the observer;
	// it runs inside gRPC's dial and handshake, so it never waits.
	report func(codec.UpstreamConnect)
}

// downstreamConns is a tap's open downstream connections. As the stats
// handler of the tap's gRPC server it gives every downstream connection
// its own upstream and closes that upstream when the connection ends.
type downstreamConns struct {
	upstream upstreamConfig
	next     atomic.Uint64

	mu   sync.Mutex
	open map[*downstreamConn]struct{}
}

type downstreamConnKey struct{}

func (cs *downstreamConns) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	d := &downstreamConn{id: cs.next.Add(1), up: &cs.upstream}
	cs.mu.Lock()
	cs.open[d] = struct{}{}
	cs.mu.Unlock()
	return context.WithValue(ctx, downstreamConnKey{}, d)
}

func (cs *downstreamConns) HandleConn(ctx context.Context, st stats.ConnStats) {
	if _, ok := st.(*stats.ConnEnd); !ok {
		return
	}
	d, _ := ctx.Value(downstreamConnKey{}).(*downstreamConn)
	if d == nil {
		return
	}
	cs.mu.Lock()
	delete(cs.open, d)
	cs.mu.Unlock()
	d.close()
}

func (*downstreamConns) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (*downstreamConns) HandleRPC(context.Context, stats.RPCStats)                       {}

// closeAll closes the upstream of every connection open now.
func (cs *downstreamConns) closeAll() {
	cs.mu.Lock()
	conns := make([]*downstreamConn, 0, len(cs.open))
	for c := range cs.open {
		conns = append(conns, c)
	}
	cs.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// downstreamConn is one client connection to the tap. It owns the one upstream
// connection that serves all its streams, so the control plane sees each
// client on a connection of its own, as it would without the tap.
type downstreamConn struct {
	id uint64
	up *upstreamConfig

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
	cc, err := d.newClientConn(userAgent)
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

// newClientConn creates the connection's upstream, which dials through
// d.dialer and times its handshake, so that d learns how it came up.
func (d *downstreamConn) newClientConn(userAgent string) (*grpc.ClientConn, error) {
	u := d.up
	creds := insecure.NewCredentials()
	if u.tls != nil {
		creds = credentials.NewTLS(u.tls)
	}
	target := "passthrough:///" + u.addr.Addr
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(timedCreds{TransportCredentials: creds, conn: d}),
		grpc.WithContextDialer(d.dialer()),
		grpc.WithStatsHandler(upstreamStats{}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(u.maxMessageSize),
			grpc.MaxCallSendMsgSize(u.maxMessageSize),
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
		// Pings only while a stream is open, as istio-agent's: istiod takes
		// a ping on a connection without streams for a strike and closes it
		// at the third with GOAWAY too_many_pings (pilot/pkg/grpc), after
		// which gRPC doubles this connection's keepalive for good. The
		// connection outlives its streams while the client's does.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:    u.keepalive,
			Timeout: 10 * time.Second,
		}),
	}
	if userAgent != "" {
		opts = append(opts, grpc.WithUserAgent(userAgent))
	}
	if u.addr.Network == "unix" {
		target = "passthrough:///localhost"
		opts = append(opts, grpc.WithAuthority("localhost"))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating upstream connection to %s: %w", u.addr, err)
	}
	return cc, nil
}

// dialer returns the context dialer of one downstream connection's upstream.
// It resolves and connects in steps of its own, so each phase is timed.
func (d *downstreamConn) dialer() func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		up := d.up.addr
		t := &connectTiming{c: codec.UpstreamConnect{ConnID: d.id, Upstream: up.String(), Start: time.Now()}}
		conn, err := dialTimed(ctx, up, t)
		if err != nil {
			d.reportConnect(t.c)
			return nil, err
		}
		return &timedConn{Conn: conn, timing: t}, nil
	}
}

// timedCreds times the TLS handshake (or the no-op of plaintext) that follows
// a dial, and reports the connection's phases once it is done.
type timedCreds struct {
	credentials.TransportCredentials
	conn *downstreamConn
}

func (c timedCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := raw.(*timedConn)
	if !ok {
		return c.TransportCredentials.ClientHandshake(ctx, authority, raw)
	}
	start := time.Now()
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, tc.Conn)
	rec := tc.timing.c
	if c.TransportCredentials.Info().SecurityProtocol != "insecure" {
		rec.TLS = time.Since(start)
	}
	if err != nil {
		rec.FailedPhase, rec.Err = "tls", err
	}
	c.conn.reportConnect(rec)
	return conn, info, err
}

func (c timedCreds) Clone() credentials.TransportCredentials {
	return timedCreds{TransportCredentials: c.TransportCredentials.Clone(), conn: c.conn}
}

// reportConnect records how d's upstream connection came up and queues the
// report for the observer. It runs inside gRPC's dial and handshake, so it
// never waits on the observer (or on the log).
func (d *downstreamConn) reportConnect(c codec.UpstreamConnect) {
	d.mu.Lock()
	d.lastConnect = &c
	d.mu.Unlock()
	d.up.report(c)
}
