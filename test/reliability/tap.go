package reliability

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/promsum"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// TapOptions shape a tap started by StartTap.
type TapOptions struct {
	Upstream tap.Address
	// Detect holds the detectors' thresholds; zero fields take the defaults.
	Detect track.Config
	// Tracing, when set, adds the OpenTelemetry exporter as adstap run does
	// with --otlp-endpoint. Its Getenv defaults to an empty environment.
	Tracing *tracing.Config
}

// Tap is a tap started as `adstap run` starts it, by pipeline.Start: the
// tracker feeding the live log, the Prometheus metrics (reading the relay's
// own counters) and, when asked, the span exporter, with the tracker's clock.
// An Events sink counts what the tracker emitted, and the live log is kept.
type Tap struct {
	Addr    tap.Address
	Server  *tap.Server
	Tracker *track.Tracker
	Metrics *metrics.Metrics
	Tracing *tracing.Tracing // nil without TapOptions.Tracing
	Events  *events
	Log     *logBuffer
}

// StartTap starts a tap in front of o.Upstream on a free loopback port. It is
// shut down at cleanup, as SIGTERM would: streams end, spans are flushed.
func StartTap(t testing.TB, o TapOptions) *Tap {
	t.Helper()
	logBuf := &logBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, nil))
	events := &events{}
	running, err := pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap:     tap.Config{Upstream: o.Upstream},
		Observe: pipeline.Config{Logger: log, Version: "reliability", Detect: o.Detect, Tracing: o.Tracing, Sinks: []track.Sink{events}},
		Listen:  tap.Address{Network: "tcp", Addr: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatalf("reliability: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := running.Close(ctx); err != nil {
			t.Logf("reliability: %v", err)
		}
		if err := running.Err(); err != nil {
			t.Errorf("reliability: tap Serve: %v", err)
		}
	})
	return &Tap{
		Addr:    running.Addr(),
		Server:  running.Server,
		Tracker: running.Tracker,
		Metrics: running.Metrics,
		Tracing: running.Tracing,
		Events:  events,
		Log:     logBuf,
	}
}

// Metric sums the samples of the metric family name whose labels include
// labels (nil: every sample), as a scrape of /metrics would show them:
// counters and gauges by value, histograms by their count.
func (tp *Tap) Metric(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	sum, err := promsum.Gathered(tp.Metrics.Registry(), name, labels)
	if err != nil {
		t.Fatalf("reliability: gathering metrics: %v", err)
	}
	return sum
}

// Client dials the tap as a client would; the connection is closed at
// cleanup.
func (tp *Tap) Client(t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := xdstest.Dial(tp.Addr)
	if err != nil {
		t.Fatalf("reliability: dialing the tap: %v", err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// OpenADS opens a raw SotW ADS stream on cc, or fails the test.
func OpenADS(t testing.TB, ctx context.Context, cc *grpc.ClientConn) grpc.ClientStream {
	t.Helper()
	s, err := xdstest.OpenRaw(ctx, cc, xdstest.ADSMethod)
	if err != nil {
		t.Fatalf("reliability: opening an ADS stream: %v", err)
	}
	return s
}

// SotW is what the relay counted on SotW streams.
func (tp *Tap) SotW() codec.ProtocolStats { return tp.Server.Stats()[codec.SotW] }

// logBuffer is the live log of a tap: every line counted, the first 4 MiB
// kept, and every warning and error kept (up to 4 MiB more).
type logBuffer struct {
	mu       sync.Mutex
	head     bytes.Buffer
	warnings bytes.Buffer
	partial  []byte
	lines    int
}

const logKeep = 4 << 20

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines += bytes.Count(p, []byte{'\n'})
	if l.head.Len() < logKeep {
		l.head.Write(p[:min(len(p), logKeep-l.head.Len())])
	}
	// slog writes whole records, one line each; keep the warnings whole.
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := l.partial[:i+1]
		if (bytes.Contains(line, []byte("level=WARN")) || bytes.Contains(line, []byte("level=ERROR"))) && l.warnings.Len() < logKeep {
			l.warnings.Write(line)
		}
		l.partial = l.partial[i+1:]
	}
	l.partial = append([]byte(nil), l.partial...)
	return len(p), nil
}

// Count is how many kept lines contain s: lines of the first 4 MiB, and
// warnings and errors after them.
func (l *logBuffer) Count(s string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// String is the kept log: its first 4 MiB, then the warnings and errors
// that came after.
func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head.Len() < logKeep {
		return l.head.String()
	}
	head := l.head.String()
	if i := strings.LastIndexByte(head, '\n'); i >= 0 {
		head = head[:i+1]
	}
	// Warnings already in the head are not repeated.
	var b strings.Builder
	b.WriteString(head)
	for _, line := range strings.SplitAfter(l.warnings.String(), "\n") {
		if line != "" && !strings.Contains(head, line) {
			b.WriteString(line)
		}
	}
	return b.String()
}
