package benchmark

import (
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
	"github.com/adstap/adstap/tap"
)

// Path is one way from the load generator's clients to its upstream.
type Path string

const (
	Direct  Path = "direct"   // client → upstream: the floor
	Relay   Path = "relay"    // through a plain pass-through relay, one upstream connection per client connection
	TapOff  Path = "tap-off"  // through adstap with no observer
	TapFull Path = "tap-full" // through adstap with tracker, metrics, tracing and live log
	Typed   Path = "typed"    // through a relay that unmarshals and re-marshals every message
	// Sidecar is the adstap binary started as the injection template starts
	// it (its flags and environment, capture on, to a file), with GOMEMLIMIT
	// as its container's memory limit gives it; SidecarNoCapture is the same
	// without --capture.
	Sidecar          Path = "sidecar"
	SidecarNoCapture Path = "sidecar-nocapture"
)

// standardPaths are the five paths every workload but W7 runs over.
var standardPaths = []Path{Direct, Relay, TapOff, TapFull, Typed}

// Paths are all the paths, in the order the report shows them.
var Paths = []Path{Direct, Relay, TapOff, TapFull, Typed, Sidecar, SidecarNoCapture}

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
	if p == Sidecar || p == SidecarNoCapture {
		return func(string) (Middle, error) {
			return nil, fmt.Errorf("the %s path runs the adstap binary: start it with Child", p)
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

// inProcess reports only what the middle itself counts (spans, log bytes).
type inProcess struct{ s *server }

func (m inProcess) Addr() string                  { return m.s.Addr() }
func (inProcess) Begin() error                    { return nil }
func (m inProcess) End() (Window, error)          { return Window{End: m.s.counts()}, nil }
func (m inProcess) Sample() (Usage, error)        { return m.s.counts(), nil }
func (m inProcess) SampleAfterGC() (Usage, error) { return m.s.counts(), nil }
func (m inProcess) Close() error                  { return m.s.Close() }

// server is a running middle: a tap (observation off or full), the
// pass-through relay or the typed relay.
type server struct {
	addr  string
	close func() error
	// spans and logBytes count what a full tap's tracing and live log
	// produced, to show they were on.
	spans, logBytes atomic.Int64
}

func (s *server) counts() Usage {
	return Usage{Spans: s.spans.Load(), LogBytes: s.logBytes.Load()}
}

// Addr is the address clients connect to.
func (s *server) Addr() string { return s.addr }

// Close ends every stream and stops the middle.
func (s *server) Close() error { return s.close() }

// serve starts path's middle in front of upstream, listening on listen.
func serve(p Path, upstream, listen string) (*server, error) {
	s := &server{}
	if p == TapOff || p == TapFull {
		var err error
		if s.close, err = s.serveTap(upstream, listen, p == TapFull); err != nil {
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

// countingWriter counts what the live log writes before it reaches /dev/null.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return c.w.Write(p)
}

// serveTap runs a tap, its log to /dev/null at the default info level. With
// full, it is started as `adstap run` starts it (pipeline.Start), observing
// everything: the tracker, the live log, Prometheus metrics served on a
// loopback admin port, tracing to a discarding exporter, and the tracker's
// one-second tick; without, it is the relay alone, with no observer.
func (s *server) serveTap(upstream, listen string, full bool) (func() error, error) {
	addr, err := tap.ParseAddress(upstream)
	if err != nil {
		return nil, err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	log := slog.New(export.NewPretty(countingWriter{devnull, &s.logBytes}, slog.LevelInfo))
	stop, err := startTap(tap.Config{Upstream: addr, Logger: log}, tap.Address{Network: "tcp", Addr: listen}, full, &s.spans, &s.addr)
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

// startTap starts a tap listening on listen, with everything observed when
// full, and sets *addr to where clients connect.
func startTap(cfg tap.Config, listen tap.Address, full bool, spans *atomic.Int64, addr *string) (stop func(context.Context) error, err error) {
	if full {
		running, err := pipeline.Start(context.Background(), pipeline.RunConfig{
			Tap: cfg,
			Observe: pipeline.Config{
				Logger: cfg.Logger, Version: "bench",
				Tracing: &export.TracingConfig{Getenv: os.Getenv, Exporter: discardSpans{spans}},
			},
			Listen: listen,
			Admin:  "127.0.0.1:0",
		})
		if err != nil {
			return nil, err
		}
		*addr = running.Addr().Addr
		return func(ctx context.Context) error {
			running.Close(ctx)
			return running.Err()
		}, nil
	}
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
