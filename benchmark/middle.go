package benchmark

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/tap"
)

// Path is one way from the load generator's clients to its upstream.
type Path string

const (
	Direct Path = "direct" // client → upstream: the floor
	Relay  Path = "relay"  // through a plain pass-through relay, one upstream connection per client connection
	// Tap is `adstap run` as it ships: its flags at their defaults, turned
	// into a configuration by the function `adstap run` uses (tapRunConfig).
	Tap Path = "tap"
	// TapLean is Tap with every optional output off (no reference check):
	// what the defaults cost.
	TapLean Path = "tap-lean"
	// TapTraced is Tap with tracing on, to an exporter that discards the
	// spans: tracing is off as shipped (no collector), on in most meshes.
	TapTraced Path = "tap-traced"
	// TapOff is adstap's relay with no observer at all: the extra hop alone.
	TapOff Path = "tap-off"
	Typed  Path = "typed" // through a relay that unmarshals and re-marshals every message
	// Sidecar is the adstap binary started as the injection template starts
	// it (its flags and environment, capture on, to a file), with GOMEMLIMIT
	// as its container's memory limit gives it; SidecarNoCapture is the same
	// without --capture.
	Sidecar          Path = "sidecar"
	SidecarNoCapture Path = "sidecar-nocapture"
	// Head and Base are two adstap binaries, each run with its default
	// flags (only where it listens, its upstream and its admin address
	// set): `adstap-bench compare`'s, today's and a base commit's.
	Head Path = "head"
	Base Path = "base"
)

// standardPaths are the five paths every workload but W7 runs over.
var standardPaths = []Path{Direct, Relay, Tap, TapLean, Typed}

// optionalPaths run only when asked for (-paths), over the workloads of the
// standard paths.
var optionalPaths = []Path{TapOff, TapTraced}

// Paths are all the paths, in the order the report shows them.
var Paths = []Path{Direct, Relay, TapOff, TapLean, Tap, TapTraced, Typed, Sidecar, SidecarNoCapture, Head, Base}

// isTap says whether p's middle is adstap's observed tap, in this program
// or a binary: one whose metrics count what it did not keep.
func isTap(p Path) bool {
	switch p {
	case Tap, TapLean, TapTraced, Sidecar, SidecarNoCapture, Head, Base:
		return true
	}
	return false
}

// Middle is what stands between the clients and the upstream on one path.
type Middle interface {
	// Addr is where the clients connect.
	Addr() string
	// Begin starts a measured window: the peak resident memory is reset.
	Begin() error
	// End ends the window and says what the middle used during it.
	End() (Window, error)
	// Sample reads the middle's usage now.
	Sample() (Usage, error)
	// SampleAfterGC collects the middle's garbage and returns what it
	// freed to the OS, then reads its usage: its live memory.
	SampleAfterGC() (Usage, error)
	// Close stops the middle, ending its streams.
	Close() error
}

// StartMiddle starts the middle of one path in front of an upstream address.
type StartMiddle func(upstream string) (Middle, error)

// direct is the path with nothing in the middle: it uses no CPU or memory.
type direct struct{ addr string }

func (d direct) Addr() string                { return d.addr }
func (direct) Begin() error                  { return nil }
func (direct) End() (Window, error)          { return Window{}, nil }
func (direct) Sample() (Usage, error)        { return Usage{}, nil }
func (direct) SampleAfterGC() (Usage, error) { return Usage{}, nil }
func (direct) Close() error                  { return nil }
func startDirect(up string) (Middle, error)  { return direct{addr: up}, nil }

// InProcess starts path's middle in this process. Its usage is not
// measured (it would include the load generator's): the tests use it to
// check correctness.
func InProcess(p Path) StartMiddle {
	if p == Direct {
		return startDirect
	}
	if p == Sidecar || p == SidecarNoCapture || p == Head || p == Base {
		return func(string) (Middle, error) {
			return nil, fmt.Errorf("the %s path runs an adstap binary: start it with Child", p)
		}
	}
	return func(up string) (Middle, error) {
		s, err := serve(p, up, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		return inProcess{s}, nil
	}
}

// inProcess reports only what the middle itself counts (spans, log bytes,
// and at a window's end a tap's losses).
type inProcess struct{ s *server }

func (m inProcess) Addr() string { return m.s.Addr() }
func (inProcess) Begin() error   { return nil }
func (m inProcess) End() (Window, error) {
	u := m.s.counts()
	err := m.s.losses(&u)
	return Window{End: u}, err
}
func (m inProcess) Sample() (Usage, error)        { return m.s.counts(), nil }
func (m inProcess) SampleAfterGC() (Usage, error) { return m.s.counts(), nil }
func (m inProcess) Close() error                  { return m.s.Close() }

// server is a running middle: a tap, the pass-through relay or the typed
// relay.
type server struct {
	addr  string
	admin string // a tap's admin address, whose /metrics count its losses
	close func() error
	// spans, logBytes and refsStopped count what a tap's tracing and live
	// log produced, to show they were on and what the log said.
	spans, logBytes, refsStopped atomic.Int64
}

func (s *server) counts() Usage {
	return Usage{Spans: s.spans.Load(), LogBytes: s.logBytes.Load(), RefsStopped: s.refsStopped.Load()}
}

// losses reads what the tap counted of its losses from its own metrics, as
// a user would; nothing for a relay.
func (s *server) losses(u *Usage) error {
	if s.admin == "" {
		return nil
	}
	return scrapeLosses(s.admin, u)
}

// Addr is the address clients connect to.
func (s *server) Addr() string { return s.addr }

// Close ends every stream and stops the middle.
func (s *server) Close() error { return s.close() }

// serve starts path's middle in front of upstream, listening on listen.
func serve(p Path, upstream, listen string) (*server, error) {
	s := &server{}
	switch p {
	case TapOff, Tap, TapLean, TapTraced:
		var err error
		if s.close, err = s.serveTap(p, upstream, listen); err != nil {
			return nil, err
		}
		return s, nil
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	s.addr = lis.Addr().String()
	switch p {
	case Relay:
		s.close, err = servePassRelay(lis, upstream)
	case Typed:
		s.close, err = serveTyped(lis, upstream)
	default:
		err = fmt.Errorf("no middle for path %q", p)
	}
	if err != nil {
		lis.Close()
		return nil, err
	}
	return s, nil
}

// discardSpans is a span exporter that counts spans and drops them: tracing
// does all its work up to the wire.
type discardSpans struct{ n *atomic.Int64 }

func (d discardSpans) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.n.Add(int64(len(spans)))
	return nil
}
func (discardSpans) Shutdown(context.Context) error { return nil }

// refsStoppedLine is what the reference check logs when it stops checking
// a stream (references.References): no metric counts those streams.
var refsStoppedLine = []byte("references no longer checked")

// countingWriter counts what the live log writes before it reaches its
// destination, and the streams whose references stopped being checked.
type countingWriter struct {
	w          io.Writer
	n, stopped *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	if c.stopped != nil {
		c.stopped.Add(int64(bytes.Count(p, refsStoppedLine)))
	}
	return c.w.Write(p)
}

// benchEnv is the environment a benchmark's tap gets: its log, and no
// OTEL_* variables, so that tracing is off as shipped whatever the
// harness's environment says.
func benchEnv(log *slog.Logger, logOut *export.LogWriter) runconfig.Env {
	return runconfig.Env{Logger: log, LogOut: logOut, Version: "bench", Getenv: func(string) string { return "" }}
}

// tapRunConfig is the configuration of path p's tap: `adstap run`'s flags
// at their defaults (runconfig.Defaults), turned into a configuration by
// the function `adstap run` uses (runconfig.Build), with only what a
// benchmark must set overridden — where it listens, its upstream, its
// admin server on a free loopback port, its log and version (benchEnv) —
// and, for TapLean and TapTraced, what those paths are. A test ties the
// Tap path to `adstap run` given those flags alone.
func tapRunConfig(p Path, upstream, listen string, log *slog.Logger, logOut *export.LogWriter, spans *atomic.Int64) (pipeline.RunConfig, error) {
	f := runconfig.Defaults()
	f.Upstream, f.Listen, f.Admin = upstream, listen, "127.0.0.1:0"
	if p == TapLean {
		// Every output `adstap run` has on by default and can do without.
		f.CheckReferences = false
	}
	run, err := runconfig.Build(f, benchEnv(log, logOut))
	if err != nil {
		return run, err
	}
	if p == TapTraced {
		run.Observe.Tracing.Exporter = discardSpans{spans}
	}
	return run, nil
}

// serveTap runs path p's tap, its log to /dev/null at `adstap run`'s
// default level and format. Tap, TapLean and TapTraced are started as
// `adstap run` starts them (tapRunConfig, pipeline.Start); TapOff is the
// relay alone, with no observer.
func (s *server) serveTap(p Path, upstream, listen string) (func() error, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	dest := countingWriter{devnull, &s.logBytes, &s.refsStopped}
	f := runconfig.Defaults()
	if p == TapOff {
		log, err := runconfig.NewLogger(dest, f.LogLevel, f.LogFormat)
		if err != nil {
			devnull.Close()
			return nil, err
		}
		addr, err := tap.ParseAddress(upstream)
		if err != nil {
			devnull.Close()
			return nil, err
		}
		stop, err := startRelayOnly(tap.Config{Upstream: addr, Logger: log}, tap.Address{Network: "tcp", Addr: listen}, &s.addr)
		if err != nil {
			devnull.Close()
			return nil, err
		}
		return func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := stop(ctx)
			devnull.Close()
			return err
		}, nil
	}
	log, logOut, err := runconfig.NewLog(dest, f.LogLevel, f.LogFormat)
	if err != nil {
		devnull.Close()
		return nil, err
	}
	fail := func(err error) (func() error, error) {
		runconfig.CloseLog(logOut, time.Second)
		devnull.Close()
		return nil, err
	}
	run, err := tapRunConfig(p, upstream, listen, log, logOut, &s.spans)
	if err != nil {
		return fail(err)
	}
	running, err := pipeline.Start(context.Background(), run)
	if err != nil {
		return fail(err)
	}
	s.addr, s.admin = running.Addr().Addr, running.AdminAddr()
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		running.Close(ctx)
		err := running.Err()
		runconfig.CloseLog(logOut, time.Second)
		devnull.Close()
		return err
	}, nil
}

// startRelayOnly starts adstap's relay with no observer, listening on
// listen, and sets *addr to where clients connect.
func startRelayOnly(cfg tap.Config, listen tap.Address, addr *string) (stop func(context.Context) error, err error) {
	srv, err := tap.New(cfg)
	if err != nil {
		return nil, err
	}
	lis, err := tap.Listen(listen)
	if err != nil {
		return nil, err
	}
	*addr = lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	return func(ctx context.Context) error {
		srv.Shutdown(ctx)
		return <-served
	}, nil
}

func isEOF(err error) bool { return err == io.EOF }
