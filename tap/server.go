package tap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // so clients that compress requests are understood
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/adstap/adstap/codec"
)

// Defaults for the Config fields left zero.
const (
	// DefaultMaxMessageSize fits the largest pushes seen in real meshes (istiod's
	// size histogram tops out at 40 MB) with room to spare; gRPC's 4 MiB default
	// would reject real CDS and EDS responses.
	DefaultMaxMessageSize = 512 << 20
	// DefaultUpstreamKeepalive matches istio-agent's pings to istiod.
	DefaultUpstreamKeepalive = 30 * time.Second
	// DefaultObserveQueueBytes bounds the frames waiting for observers, over all streams.
	DefaultObserveQueueBytes = 256 << 20
	// defaultObserveQueueFrames bounds the frames waiting for the observer of one stream.
	defaultObserveQueueFrames = 4096
)

// Config says where a tap relays to and how.
type Config struct {
	Upstream    Address
	UpstreamTLS *tls.Config // nil: plaintext
	ListenTLS   *tls.Config // nil: plaintext

	MaxMessageSize    int
	UpstreamKeepalive time.Duration

	Observer Observer // nil: relay only
	// ObserveQueueBytes bounds the bytes of frames waiting for the
	// observer, over every stream; a frame that does not fit is relayed
	// unobserved and counted (Frame.Skipped). A frame larger than the
	// whole bound is held apart, one at a time, so that a push larger than
	// the bound is still observed (Server.ObserveQueue counts them): the
	// queues hold at most the bound plus one such frame, whose buffers the
	// relay holds anyway while it forwards it.
	ObserveQueueBytes  int64
	ObserveQueueFrames int
	// ObserveWorkers is how many goroutines run the observer, for every
	// stream of the tap; zero means GOMAXPROCS. Each stream is observed by
	// one of them at a time, so an observer stuck on as many streams as
	// there are workers holds up the observation (not the relay) of all.
	ObserveWorkers int

	// MaxConcurrentStreams bounds the streams open at once, over every
	// connection; MaxStreamsPerConnection those of one connection. Streams
	// past either end with ResourceExhausted. MaxPendingConnections bounds
	// the connections accepted but not yet judged by the protocol guard;
	// past it new connections are closed at once. Zero means the default.
	MaxConcurrentStreams    int
	MaxStreamsPerConnection int
	MaxPendingConnections   int

	Logger *slog.Logger
}

// Server is a running tap: it accepts xDS clients and relays each of their
// streams to the upstream control plane.
type Server struct {
	cfg      Config
	upstream Address
	log      *slog.Logger
	grpc     *grpc.Server
	budget   byteBudget
	observe  *observePool // nil without an observer

	nextStream atomic.Uint64
	counters   [len(protocols)]relayCounters
	conns      downstreamConns

	mu       sync.Mutex
	streams  map[*context.CancelCauseFunc]struct{}
	draining bool

	// workers counts the goroutines that may outlive the streams' handlers:
	// the request pumps and the observation workers.
	workers sync.WaitGroup
	// abandon is closed when Shutdown's deadline passes: the observation
	// workers drop what they still hold (counted as skipped) and end.
	abandon     chan struct{}
	abandonOnce sync.Once
	connects    connectReports
	limits      limits
}

// orDefault sets a limit left zero (or negative) to its default.
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// New builds a tap from cfg; Serve starts it.
func New(cfg Config) (*Server, error) {
	if cfg.Upstream.Addr == "" {
		return nil, errors.New("tap: no upstream address")
	}
	orDefault(&cfg.MaxMessageSize, DefaultMaxMessageSize)
	orDefault(&cfg.UpstreamKeepalive, DefaultUpstreamKeepalive)
	orDefault(&cfg.ObserveQueueBytes, DefaultObserveQueueBytes)
	orDefault(&cfg.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	orDefault(&cfg.MaxStreamsPerConnection, DefaultMaxStreamsPerConnection)
	orDefault(&cfg.MaxPendingConnections, DefaultMaxPendingConnections)
	orDefault(&cfg.ObserveQueueFrames, defaultObserveQueueFrames)
	// As many workers as can run at once: more would only take turns with
	// the relay for the same cores. A burst they fall behind on gets
	// helpers for its while (observePool.help).
	orDefault(&cfg.ObserveWorkers, runtime.GOMAXPROCS(0))
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{
		cfg:      cfg,
		upstream: cfg.Upstream,
		log:      cfg.Logger,
		budget:   byteBudget{limit: cfg.ObserveQueueBytes},
		abandon:  make(chan struct{}),
		streams:  make(map[*context.CancelCauseFunc]struct{}),
	}
	s.conns.open = make(map[*downstreamConn]struct{})
	s.conns.upstream = upstreamConfig{
		addr:           cfg.Upstream,
		tls:            cfg.UpstreamTLS,
		maxMessageSize: cfg.MaxMessageSize,
		keepalive:      cfg.UpstreamKeepalive,
		report:         s.reportConnect,
	}
	if cfg.Observer != nil {
		s.observe = newObservePool(cfg.Observer, &s.budget, cfg.ObserveQueueFrames, cfg.ObserveWorkers, s.abandon, &s.workers)
	}
	opts := []grpc.ServerOption{
		grpc.UnknownServiceHandler(s.handle),
		grpc.ForceServerCodecV2(codec.Passthrough{}),
		grpc.MaxRecvMsgSize(cfg.MaxMessageSize),
		grpc.MaxSendMsgSize(cfg.MaxMessageSize),
		grpc.StatsHandler(&s.conns),
		// Fixed windows: no window-estimate ping to the client at each
		// of its ACKs (connWindow).
		grpc.InitialWindowSize(connWindow),
		grpc.InitialConnWindowSize(connWindow),
		// Envoy and istio-agent ping every 30 s or so; accept far more often
		// than that, idle or not, so no client is ever sent too_many_pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             time.Second,
			PermitWithoutStream: true,
		}),
		grpc.WaitForHandlers(true),
	}
	if cfg.ListenTLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.ListenTLS)))
	}
	s.grpc = grpc.NewServer(opts...)
	return s, nil
}

// connWindow is the flow-control window of the clients' streams and
// connections to the tap: a window set turns off gRPC's estimate of the
// link's bandwidth-delay product, which pings the client whenever data
// arrives with no ping in flight. A client sends the tap small requests
// (ACKs), one a push: with the estimate on, every ACK cost a ping to the
// client and its answer back. The upstream keeps the estimate: a fixed
// window there (istio-agent's 1 MiB) cost 7-10 % more CPU relaying 10 MB
// pushes and 15 % more memory in a fan-out of one to a thousand streams,
// where the estimate's small first window paces the control plane.
const connWindow = 1 << 20

// Serve accepts clients on lis until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	g := newGuardedListener(lis, s.cfg.ListenTLS != nil, s.log, defaultPeekTimeout, s.cfg.MaxPendingConnections, &s.limits)
	err := s.grpc.Serve(g)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serving on %s: %w", lis.Addr(), err)
	}
	return nil
}

// Draining reports whether Shutdown has begun.
func (s *Server) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// Shutdown stops accepting clients, ends every open stream with Unavailable so
// that clients reconnect elsewhere, and waits for the streams to finish and
// their frames to be observed until ctx is done, when it closes whatever is
// left and returns: it never outlasts ctx.
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()

	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()

	s.mu.Lock()
	for cancel := range s.streams {
		(*cancel)(errDraining)
	}
	s.mu.Unlock()

	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
		<-stopped
	}

	s.conns.closeAll()
	// Every handler has returned, so every stream's end is queued for the
	// observer: the observation workers end once they have told it.
	if s.observe != nil {
		s.observe.close()
	}
	// The observer may still have frames to see (up to --observe-queue-bytes
	// of them); it gets what is left of ctx. Past it the workers drop the
	// rest (counted as skipped) and end once the frame in hand is done,
	// without Shutdown waiting for them.
	workersDone := make(chan struct{})
	go func() {
		s.workers.Wait()
		close(workersDone)
	}()
	select {
	case <-workersDone:
	case <-ctx.Done():
		s.abandonOnce.Do(func() { close(s.abandon) })
	}
	s.connects.close(ctx)
}

// reportConnect queues the report of how an upstream connection came up
// for the observer; it never waits on the observer (or on the log).
func (s *Server) reportConnect(c codec.UpstreamConnect) {
	s.connects.queue(c, s.deliverConnect)
}

func (s *Server) deliverConnect(c codec.UpstreamConnect) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.OnUpstreamConnect(c)
	} else if c.Err != nil {
		s.log.Warn("upstream connection failed", "upstream", c.Upstream, "phase", c.FailedPhase, "err", c.Err)
	}
}

// DroppedConnectReports counts the upstream connect reports dropped because
// the observer had fallen more than a thousand behind.
func (s *Server) DroppedConnectReports() uint64 { return s.connects.dropped.Load() }

// track registers a stream so that Shutdown can end it; it refuses new
// streams once draining, or past MaxConcurrentStreams, with the status the
// stream should end with.
func (s *Server) track(cancel context.CancelCauseFunc) (untrack func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, errDraining
	}
	if len(s.streams) >= s.cfg.MaxConcurrentStreams {
		return nil, s.refuseStream(false)
	}
	key := &cancel
	s.streams[key] = struct{}{}
	return func() {
		s.mu.Lock()
		delete(s.streams, key)
		s.mu.Unlock()
	}, nil
}

// Refused reports what the tap turned away at its limits.
func (s *Server) Refused() Refused { return s.limits.refused() }

// refuseStream is the status a stream over a limit ends with.
func (s *Server) refuseStream(perConnection bool) error {
	if perConnection {
		s.limits.streamsOnConn.Add(1)
		if s.limits.shouldWarn(1) {
			s.log.Warn("refusing streams: a connection tried to open more than --max-streams-per-connection",
				"limit", s.cfg.MaxStreamsPerConnection, "refused_total", s.limits.streamsOnConn.Load())
		}
		return status.Errorf(codes.ResourceExhausted, "adstap: this connection already carries %d streams, the most --max-streams-per-connection allows", s.cfg.MaxStreamsPerConnection)
	}
	s.limits.streams.Add(1)
	if s.limits.shouldWarn(0) {
		s.log.Warn("refusing streams: --max-concurrent-streams are open", "limit", s.cfg.MaxConcurrentStreams, "refused_total", s.limits.streams.Load())
	}
	return status.Errorf(codes.ResourceExhausted, "adstap: %d streams are open, the most --max-concurrent-streams allows; reconnect later or to another tap", s.cfg.MaxConcurrentStreams)
}

// ObserveQueue reports what the observation queues hold now, and how many
// frames over their bound they took.
func (s *Server) ObserveQueue() ObserveQueue {
	q := ObserveQueue{Bytes: s.budget.used.Load() + s.budget.large.Load(), OverBound: s.budget.overBound.Load()}
	if s.observe != nil {
		q.Folded = s.observe.folder.frames.Load()
	}
	return q
}

var errDraining = status.Error(codes.Unavailable, "adstap is shutting down: reconnect")

// Stats reports the relay's counters, per protocol. They count every frame,
// including frames the observers never saw.
func (s *Server) Stats() map[codec.Protocol]codec.ProtocolStats {
	out := make(map[codec.Protocol]codec.ProtocolStats, len(protocols))
	for i, p := range protocols {
		c := &s.counters[i]
		out[p] = codec.ProtocolStats{
			StreamsActive: c.streamsActive.Load(),
			StreamsOpened: c.streamsOpened.Load(),
			Messages:      [2]uint64{c.messages[0].Load(), c.messages[1].Load()},
			Bytes:         [2]uint64{c.bytes[0].Load(), c.bytes[1].Load()},
		}
	}
	return out
}

// handle is the gRPC handler for every method the tap receives.
//
// Its goroutine spends an idle stream's life parked in pumpResponses'
// RecvMsg with handle's frame beneath it, and the runtime halves a stack at
// a collection only while less than a quarter of it is in use. So the
// setting up is in open and the ending in end, and handle's own frame stays
// small: parked, the goroutine uses under 4 KB, and a stack that the
// stream's start grew to 16 KB comes back to 8 KB, as a plain relay's does
// (docs/performance.md, W3).
func (s *Server) handle(_ any, down grpc.ServerStream) (err error) {
	r, err := s.open(down)
	if err != nil {
		return err
	}
	defer func() { s.end(r, err) }()
	return r.pumpResponses()
}

// open starts relaying the stream down: it opens the upstream stream and
// starts the request pump. When it fails, it has undone what it did.
//
//go:noinline
func (s *Server) open(down grpc.ServerStream) (_ *relay, err error) {
	arrived := time.Now()
	ctx := down.Context()
	method, _ := grpc.MethodFromServerStream(down)
	conn, _ := ctx.Value(downstreamConnKey{}).(*downstreamConn)
	if conn == nil {
		return nil, status.Error(codes.Internal, "adstap: stream without a connection")
	}
	header, _ := metadata.FromIncomingContext(ctx)

	upCtx, cancel := context.WithCancelCause(ctx)
	defer func() {
		if err != nil {
			cancel(nil)
		}
	}()
	untrack, err := s.track(cancel)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			untrack()
		}
	}()
	if !conn.openStream(s.cfg.MaxStreamsPerConnection) {
		return nil, s.refuseStream(true)
	}
	defer func() {
		if err != nil {
			conn.closeStream()
		}
	}()

	cc, err := conn.upstream(first(header.Get("user-agent")))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "adstap: upstream %s: %v", s.upstream, err)
	}
	call := &callState{}
	upCtx = withCallState(metadata.NewOutgoingContext(upCtx, forwardedHeader(header)), call)
	connectedBefore := conn.connect()
	up, err := cc.NewStream(upCtx, bidi, method, grpc.ForceCodecV2(codec.Passthrough{}))
	if err != nil {
		_, err = upstreamFailure(upCtx, call, err, s.upstream, s.cfg.MaxMessageSize)
		return nil, err
	}

	proto := codec.ProtocolOf(method)
	r := &relay{log: s.log, upstream: s.upstream, maxMessageSize: s.cfg.MaxMessageSize, down: down, up: up, call: call,
		ctx: upCtx, cancel: cancel, release: func() { conn.closeStream(); untrack() }, count: &s.counters[protocolIndex(proto)]}
	r.info = StreamInfo{
		ID:       s.nextStream.Add(1),
		ConnID:   conn.id,
		Method:   method,
		Protocol: proto,
		OpenedAt: arrived,
		Connect:  freshConnect(connectedBefore, conn.connect()),
		Header:   header,
	}
	r.count.streamsOpened.Add(1)
	r.count.streamsActive.Add(1)
	if p, ok := peer.FromContext(ctx); ok {
		r.info.Peer = p.Addr
	}
	if s.observe != nil {
		r.obs = s.observe.startObservation(r.info)
	}
	r.info.Header = nil // the observation has it for OnStreamOpen
	s.log.Debug("stream opened", "stream", r.info.ID, "conn", conn.id, "method", method, "peer", r.info.Peer)

	// The pump may outlive this handler by a moment: it returns when gRPC
	// ends the downstream stream after the handler does, which is the only
	// thing that can wake a pending RecvMsg.
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		r.pumpRequests()
	}()
	return r, nil
}

// end undoes what open did, once the stream has ended with err.
//
//go:noinline
func (s *Server) end(r *relay, err error) {
	s.log.Debug("stream closed", "stream", r.info.ID, "code", status.Code(err), "err", err)
	r.count.streamsActive.Add(-1)
	r.release()
	r.cancel(nil)
}
