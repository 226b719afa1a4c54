package mesh

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/export/page"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/promsum"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// TapOptions configure the adstap under test.
type TapOptions struct {
	// Upstream is the control plane's host:port (Engine.Addr).
	Upstream string
	// Listen is where clients connect; empty picks a loopback port. A
	// restarted tap listens where the one it replaces did.
	Listen string
	// Detect holds the detectors' thresholds (--full-sync-limit, ...).
	Detect track.Config
	// TraceGrouping is --trace-grouping; empty is the default.
	TraceGrouping string
	// RetainResources serves /debug/config (--retain-resources).
	RetainResources bool
	// Capture, when set, is the capture file (--capture), for adstap inspect.
	Capture string
	// ReferencesGrace is --references-grace; 0 is its default. References
	// are checked, as adstap run checks them by default.
	ReferencesGrace time.Duration
	// OTLPEndpoint, when set, sends the spans there (--otlp-endpoint, a
	// real Jaeger's) rather than to Tap.Spans.
	OTLPEndpoint string
	// CSDS serves CSDS and syncz on a loopback port (--csds-listen;
	// Running.CSDSAddr), which follows each resource one by one; the wait
	// for a resource never sent is Detect.InitialFetchTimeout.
	CSDS bool
	// UpstreamKeepalive is --upstream-keepalive; 0 is its default.
	UpstreamKeepalive time.Duration
}

// Tap is an adstap started as `adstap run` starts it (pipeline.Start), in
// the test's process: its live log is captured as JSON lines
// (--log-format=json), its admin pages are served on a loopback port, and
// its spans go to an in-memory exporter.
type Tap struct {
	Addr    string // where clients connect (host:port)
	Admin   string // the admin pages' base URL, http://host:port
	Log     *syncbuf.Buffer
	Running *pipeline.Running
	Spans   *SpanRecorder
	events  *eventLog
}

// StartTap starts an adstap in front of opts.Upstream. It stops when the
// test ends.
func StartTap(t *testing.T, opts TapOptions) *Tap {
	t.Helper()
	var logBuf syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	tp := &Tap{Log: &logBuf, Spans: &SpanRecorder{}, events: &eventLog{}}
	cfg := pipeline.Config{
		Logger:  log,
		Version: "istio-compat",
		Detect:  opts.Detect,
		Tracing: &tracing.Config{Exporter: tp.Spans, Grouping: opts.TraceGrouping},
		Sinks:   []track.Sink{tp.events},

		CheckReferences: true,
		ReferencesGrace: opts.ReferencesGrace,
	}
	if opts.OTLPEndpoint != "" {
		cfg.Tracing = &tracing.Config{Endpoint: opts.OTLPEndpoint, Grouping: opts.TraceGrouping}
	}
	if opts.RetainResources {
		cfg.RetainMaxBytes = 64 << 20
	}
	if opts.Capture != "" {
		w, err := capture.NewWriter(opts.Capture, capture.DefaultMaxBytes, capture.DefaultMaxFiles, "istio-compat", opts.Upstream)
		if err != nil {
			t.Fatalf("tap: capture: %v", err)
		}
		cfg.Capture = w
	}
	upstream, err := tap.ParseAddress(opts.Upstream)
	if err != nil {
		t.Fatalf("tap: upstream %q: %v", opts.Upstream, err)
	}
	listen := opts.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	tp.Running, err = pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap:     tap.Config{Upstream: upstream, MaxMessageSize: tap.DefaultMaxMessageSize, UpstreamKeepalive: opts.UpstreamKeepalive},
		Observe: cfg,
		Listen:  tap.Address{Network: "tcp", Addr: listen},
		Admin:   "127.0.0.1:0",
		CSDSListen: func() string {
			if opts.CSDS {
				return "127.0.0.1:0"
			}
			return ""
		}(),
	})
	if err != nil {
		t.Fatalf("tap: %v", err)
	}
	tp.Addr, tp.Admin = tp.Running.Addr().Addr, "http://"+tp.Running.AdminAddr()
	t.Cleanup(tp.Stop)
	return tp
}

// Stop drains the tap as SIGTERM does: open streams end with Unavailable so
// clients reconnect, then observation stops and the spans are flushed.
func (tp *Tap) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tp.Running.Close(ctx)
}

// Streams reads /debug/streams.
func (tp *Tap) Streams() (page.Streams, error) {
	var streams page.Streams
	resp, err := http.Get(tp.Admin + "/debug/streams")
	if err != nil {
		return streams, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return streams, fmt.Errorf("/debug/streams: %s", resp.Status)
	}
	return streams, json.NewDecoder(resp.Body).Decode(&streams)
}

// Page reads an admin page.
func (tp *Tap) Page(path string) (string, error) {
	resp, err := http.Get(tp.Admin + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", path, resp.Status)
	}
	return string(b), err
}

// Metric sums the samples of a metric family whose labels include want
// (counter, gauge or histogram count).
func (tp *Tap) Metric(name string, want map[string]string) float64 {
	sum, err := promsum.Gathered(tp.Running.Metrics.Registry(), name, want)
	if err != nil {
		return -1
	}
	return sum
}

// LogLine is one record of the live log.
type LogLine struct {
	Level  string         `json:"level"`
	Msg    string         `json:"msg"`
	Stream uint64         `json:"stream"`
	Detail map[string]any `json:"detail"`
}

// LogLines returns the live log's records whose message contains substr.
func (tp *Tap) LogLines(substr string) []LogLine {
	var out []LogLine
	sc := bufio.NewScanner(strings.NewReader(tp.Log.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l LogLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && strings.Contains(l.Msg, substr) {
			out = append(out, l)
		}
	}
	return out
}

// Events returns every tracker event so far.
func (tp *Tap) Events() []track.Event { return tp.events.all() }

// WaitEvents returns once cond holds for the tracker's events so far, or
// fails when ctx ends first.
func (tp *Tap) WaitEvents(ctx context.Context, cond func([]track.Event) bool) ([]track.Event, error) {
	return tp.events.wait(ctx, "adstap's events", cond)
}

// Tick runs the tracker's clock once at now, as its one-second ticker does:
// a test that must see the end of a window does not wait for it.
func (tp *Tap) Tick(now time.Time) { tp.Running.Tick(now) }

// eventLog keeps the tracker's events for the test.
type eventLog struct{ feed[track.Event] }

func (l *eventLog) OnEvent(e track.Event) { l.add(e) }

// SpanRecorder keeps every span adstap exported (the SDK's in-memory
// exporter forgets them on shutdown).
type SpanRecorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

var _ sdktrace.SpanExporter = (*SpanRecorder)(nil)

// ExportSpans keeps spans.
func (r *SpanRecorder) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, spans...)
	return nil
}

// Shutdown keeps what was exported.
func (r *SpanRecorder) Shutdown(context.Context) error { return nil }

// All returns the spans exported so far.
func (r *SpanRecorder) All() []sdktrace.ReadOnlySpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// WaitDangling polls /debug/streams until its dangling references meet cond,
// and returns them, or fails when ctx ends first.
func (tp *Tap) WaitDangling(ctx context.Context, cond func([]references.DanglingReference) bool) ([]references.DanglingReference, error) {
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	var last []references.DanglingReference
	for {
		page, err := tp.Streams()
		if err == nil {
			last = page.Dangling
			if cond(last) {
				return last, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for adstap's dangling references (last %+v): %w", last, ctx.Err())
		case <-poll.C:
		}
	}
}
