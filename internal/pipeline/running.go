package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/adstap/adstap/export/csds"
	"github.com/adstap/adstap/tap"
)

// RunConfig says how to run a tap: the relay, what observes it, and where
// it listens.
type RunConfig struct {
	// Tap is the relay's configuration. Its Observer must be nil: the
	// pipeline's is the one the tap gets (tell more with Observe.Sinks).
	// Its Logger defaults to Observe.Logger.
	Tap tap.Config
	// Observe says what observes the tap.
	Observe Config
	// Listen is where clients connect; a TCP port 0 picks a free one
	// (Running.Addr says which).
	Listen tap.Address
	// Admin, when set, is the host:port of the admin server: /healthz,
	// /readyz (ready once the tap listens, until it drains) and the
	// pipeline's pages, with AdminPages added.
	Admin      string
	AdminPages map[string]http.Handler
	// MetricsListen, when set, is a host:port serving /metrics and nothing
	// else.
	MetricsListen string
	// CSDSListen, when set, is a host:port serving each relayed proxy's
	// status resource by resource (csds.CSDS); it turns on
	// Observe.Resources.
	CSDSListen string
}

// Listener names one of RunConfig's listeners by the flag that sets it, so
// an error about it reads as the user wrote the command line.
type Listener int

const (
	ListenRelay   Listener = iota // RunConfig.Listen, --listen
	ListenAdmin                   // RunConfig.Admin, --admin
	ListenMetrics                 // RunConfig.MetricsListen, --metrics-listen
	ListenCSDS                    // RunConfig.CSDSListen, --csds-listen
)

// Listeners are every Listener, for a test that ties each to its flag.
var Listeners = []Listener{ListenRelay, ListenAdmin, ListenMetrics, ListenCSDS}

// String is the flag's name, without dashes.
func (l Listener) String() string {
	switch l {
	case ListenRelay:
		return "listen"
	case ListenAdmin:
		return "admin"
	case ListenMetrics:
		return "metrics-listen"
	case ListenCSDS:
		return "csds-listen"
	}
	return "Listener(" + strconv.Itoa(int(l)) + ")"
}

// ListenError is Start's error when one of its listeners could not be
// opened; it reads "--admin: listen tcp ...: address already in use".
type ListenError struct {
	Listener Listener
	Err      error
}

func (e *ListenError) Error() string { return "--" + e.Listener.String() + ": " + e.Err.Error() }
func (e *ListenError) Unwrap() error { return e.Err }

// Running is a tap serving clients, observed by its pipeline.
type Running struct {
	// Pipeline is what observes the tap: its tracker, metrics, outputs and
	// pages.
	*Pipeline
	Server *tap.Server

	addr     tap.Address
	admin    *adminServer // nil without RunConfig.Admin
	metrics  *adminServer // nil without RunConfig.MetricsListen
	csds     *csdsServer  // nil without RunConfig.CSDSListen
	served   chan struct{}
	serveErr error
	once     sync.Once
	closeErr error
}

// Start builds the pipeline and the tap it observes, opens the admin and
// metrics servers and then the tap's listener, and serves. Everything that
// can be wrong with the configuration fails here, before the first client
// connects; on an error, what was started is stopped and cfg.Observe.Capture
// is closed. ctx bounds only the start (tracing's set-up).
func Start(ctx context.Context, cfg RunConfig) (_ *Running, err error) {
	if cfg.Tap.Observer != nil {
		if cfg.Observe.Capture != nil {
			cfg.Observe.Capture.Close()
		}
		return nil, errors.New("pipeline: RunConfig.Tap.Observer must be nil: the tap is observed by the pipeline (add sinks with RunConfig.Observe.Sinks)")
	}
	log := cfg.Observe.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.CSDSListen != "" {
		cfg.Observe.Resources = true
	}
	p, err := newPipeline(ctx, cfg.Observe)
	if err != nil {
		return nil, err
	}
	r := &Running{Pipeline: p, served: make(chan struct{})}
	defer func() {
		if err != nil {
			r.closeServers()
			p.close(context.Background())
		}
	}()
	tcfg := cfg.Tap
	tcfg.Observer = p.tapObserver
	if tcfg.Logger == nil {
		tcfg.Logger = log
	}
	if r.Server, err = tap.New(tcfg); err != nil {
		return nil, err
	}
	p.watch(r.Server)
	if cfg.Admin != "" {
		pages := p.Pages()
		for pattern, h := range cfg.AdminPages {
			pages[pattern] = h
		}
		if r.admin, err = startAdmin(cfg.Admin, r.Server, log, pages); err != nil {
			return nil, &ListenError{Listener: ListenAdmin, Err: err}
		}
	}
	if cfg.MetricsListen != "" {
		if r.metrics, err = startMetricsServer(cfg.MetricsListen, p.Metrics.Handler(), log); err != nil {
			return nil, &ListenError{Listener: ListenMetrics, Err: err}
		}
	}
	if cfg.CSDSListen != "" {
		if r.csds, err = startCSDS(cfg.CSDSListen, csds.New(p.Tracker, p.Retained), csds.NewSyncz(p.Tracker, cfg.Observe.Version), log); err != nil {
			return nil, &ListenError{Listener: ListenCSDS, Err: err}
		}
	}
	lis, err := tap.Listen(cfg.Listen)
	if err != nil {
		return nil, &ListenError{Listener: ListenRelay, Err: err}
	}
	r.addr = cfg.Listen
	if cfg.Listen.Network == "tcp" {
		// The address bound, so that a port chosen by the system (:0) is known.
		r.addr.Addr = lis.Addr().String()
	}
	if r.admin != nil {
		r.admin.setListening()
	}
	go func() {
		r.serveErr = r.Server.Serve(lis)
		close(r.served)
	}()
	return r, nil
}

// Addr is where clients connect.
func (r *Running) Addr() tap.Address { return r.addr }

// AdminAddr is the admin server's host:port; "" without one.
func (r *Running) AdminAddr() string {
	if r.admin == nil {
		return ""
	}
	return r.admin.addr()
}

// MetricsAddr is the metrics server's host:port; "" without one.
func (r *Running) MetricsAddr() string {
	if r.metrics == nil {
		return ""
	}
	return r.metrics.addr()
}

// CSDSAddr is the CSDS server's host:port; "" without one.
func (r *Running) CSDSAddr() string {
	if r.csds == nil {
		return ""
	}
	return r.csds.addr()
}

// Done is closed when the tap stops serving: after Close, or on its own
// when its listener fails (Err says why).
func (r *Running) Done() <-chan struct{} { return r.served }

// Err is why the tap stopped serving, once Done is closed: nil after
// Close.
func (r *Running) Err() error {
	select {
	case <-r.served:
		return r.serveErr
	default:
		return nil
	}
}

// DefaultDrainTimeout is how long Close may take unless told otherwise
// (--drain-timeout): long enough for observation to write out what it holds,
// well within Kubernetes' 30 s grace period.
const DefaultDrainTimeout = 10 * time.Second

// Close drains the tap as SIGTERM does — open streams end with Unavailable
// so that clients reconnect elsewhere — then stops observation, writing out
// what the outputs hold (capture records, retained pushes, spans), and the
// admin and metrics servers, all within ctx: past it the rest is dropped and
// counted. Its errors are observation's; later calls return the first's.
func (r *Running) Close(ctx context.Context) error {
	r.once.Do(func() {
		r.Server.Shutdown(ctx)
		<-r.served
		r.closeErr = r.Pipeline.close(ctx)
		r.closeServers()
	})
	return r.closeErr
}

// closeServers stops the admin and metrics servers that were started.
func (r *Running) closeServers() {
	if r.admin != nil {
		r.admin.close()
	}
	if r.metrics != nil {
		r.metrics.close()
	}
	if r.csds != nil {
		r.csds.close()
	}
}
