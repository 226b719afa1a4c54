// Package pipeline starts a running tap — the relay, what observes it (tracker, live log, metrics, tracing, retained configuration, capture), its listener and admin pages — and stops it in order, once, for `adstap run`, the suites, the benchmark and the Istio harness alike.
package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/csds"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/page"
	"github.com/adstap/adstap/export/recorder"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// Config says what observes the tap. The zero value observes with the
// tracker, the live log and the metrics only.
type Config struct {
	// Logger receives the live log and the pipeline's own messages.
	Logger *slog.Logger
	// Version is adstap's version, shown by the metrics and the spans.
	Version string
	// Detect holds the detectors' thresholds; zero fields take the defaults.
	Detect track.Config
	// MetricsNodeLabel and MetricsMaxNodes are --metrics-node-label and
	// --metrics-max-nodes.
	MetricsNodeLabel bool
	MetricsMaxNodes  int
	// Tracing, when set and enabled (tracing.Enabled, or an Exporter
	// given), exports spans. Its Logger and ServiceVersion default to the
	// pipeline's, its Getenv to an empty environment.
	Tracing *tracing.Config
	// RetainMaxBytes > 0 keeps the accepted resources for /debug/config, up
	// to that many bytes (--retain-resources, --retain-max-bytes).
	RetainMaxBytes int64
	// CheckReferences keeps each stream's reference graph and reports the
	// references that dangle (--check-references); ReferencesGrace is how
	// long a proxy may wait for what it refers to first
	// (references.DefaultGrace when 0).
	CheckReferences bool
	ReferencesGrace time.Duration
	// Capture, when set, receives every frame; the pipeline closes it.
	Capture *capture.Writer
	// OutputQueueBytes bounds, for each output that does I/O (the capture,
	// the retained configuration), the bytes waiting for it; past it the
	// output drops work and counts it. 0 means DefaultOutputQueueBytes.
	OutputQueueBytes int64
	// LogWriter, when set, is the writer Logger writes through: the log
	// output (livelog.Log) reports its dropped lines, and the live log
	// reads the Istio objects a NACK rejected on its goroutine, in order
	// with its lines, not on an observation worker (livelog.Config.Writer).
	// Its owner closes it, after the pipeline.
	LogWriter *export.LogWriter
	// Sinks are told every tracker event after the pipeline's own sinks.
	Sinks []track.Sink
	// Resources follows every resource of every stream one by one
	// (track.Config.Resources): the never-sent finding, CSDS, status
	// --resources. Detect.InitialFetchTimeout is the finding's wait.
	Resources bool
}

// Pipeline is the observation side of one running tap.
type Pipeline struct {
	Tracker  *track.Tracker
	Metrics  *metrics.Metrics
	Tracing  *tracing.Tracing   // nil when tracing is off
	Retained *retained.Store    // nil without Config.RetainMaxBytes
	Capture  *recorder.Recorder // nil without Config.Capture
	// Upstream follows the tap's connections to its control plane.
	Upstream *upstream.Health
	// References is nil without Config.CheckReferences.
	References *references.References
	// outputs are every output of the pipeline, in the order they are
	// told the tracker's events; they close in the reverse order, each
	// after those that reach it: the reference check and the retained
	// configuration, fed accepted pushes, first, then the capture, then
	// tracing, which the reference check's spans reach, then the metrics,
	// which count the others' losses, and the live log, whose writer
	// carries the others' messages, last.
	outputs []export.Output
	// captureFile is Config.Capture, whose files /debug/capture lists.
	captureFile *capture.Writer
	relay       atomic.Pointer[tap.Server]
	// tracking decodes and tracks the frames; tapObserver is it and every
	// output that reads the frames themselves, what the tap is given.
	tracking    *Observer
	tapObserver tap.Observer
	stop        func()
}

// newPipeline builds the pipeline. Its only errors are tracing's (a bad
// OTEL_* variable or endpoint); it closes cfg.Capture on them.
func newPipeline(ctx context.Context, cfg Config) (*Pipeline, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{stop: func() {}}
	if cfg.Tracing != nil {
		tcfg := *cfg.Tracing
		if tcfg.Logger == nil {
			tcfg.Logger = log
		}
		if tcfg.ServiceVersion == "" {
			tcfg.ServiceVersion = cfg.Version
		}
		if tcfg.Getenv == nil {
			tcfg.Getenv = func(string) string { return "" }
		}
		if tcfg.Exporter != nil || tracing.Enabled(tcfg) {
			var err error
			if p.Tracing, err = tracing.New(ctx, tcfg); err != nil {
				if cfg.Capture != nil {
					cfg.Capture.Close()
				}
				return nil, err // export's errors name tracing already
			}
		}
	}
	out := export.OutputConfig{Logger: log, QueueBytes: cfg.OutputQueueBytes}
	lcfg := livelog.Config{OutputConfig: out}
	var later func(func()) bool
	if cfg.LogWriter != nil { // a nil *LogWriter would be a Writer that is not nil
		lcfg.Writer, later = cfg.LogWriter, cfg.LogWriter.Later
	}
	live := livelog.New(lcfg)
	p.Metrics = metrics.New(metrics.Config{
		OutputConfig: out,
		Relay:        metrics.RelayStatsFunc(p.relayStats),
		NodeLabel:    cfg.MetricsNodeLabel,
		MaxNodes:     cfg.MetricsMaxNodes,
		Version:      cfg.Version,
		TraceID:      p.Tracing.TraceIDFor,
		SpansDropped: p.Tracing.Drops,
		Refused: map[string]func() uint64{
			"max_concurrent_streams":     func() uint64 { return p.refused().Streams },
			"max_streams_per_connection": func() uint64 { return p.refused().StreamsOnConnection },
			"max_pending_connections":    func() uint64 { return p.refused().Connections },
		},
	})
	p.Tracing.CountFolds(p.Metrics.SpansFolded)
	p.Upstream = upstream.New(upstream.Config{OutputConfig: out})
	p.Metrics.WatchUpstream(p.Upstream)
	p.outputs = append(p.outputs, live, p.Metrics, p.Upstream)
	if p.Tracing != nil {
		p.outputs = append(p.outputs, p.Tracing)
	}
	if cfg.Capture != nil {
		p.Capture = recorder.New(recorder.Config{OutputConfig: out, Writer: cfg.Capture})
		p.captureFile = cfg.Capture
		p.outputs = append(p.outputs, p.Capture)
	}
	if cfg.RetainMaxBytes > 0 {
		p.Retained = retained.New(retained.Config{OutputConfig: out, MaxBytes: cfg.RetainMaxBytes})
		p.outputs = append(p.outputs, p.Retained)
	}
	if cfg.CheckReferences {
		rc := references.Config{OutputConfig: out, Grace: cfg.ReferencesGrace, Registry: p.Metrics.Registry()}
		if p.Tracing != nil { // a nil *Tracing would be a Spans that is not nil
			rc.Spans = p.Tracing
		}
		p.References = references.New(rc)
		p.outputs = append(p.outputs, p.References)
	}
	p.Metrics.WatchOutputs(p.outputs...)
	var sinks []track.Sink
	for _, o := range p.outputs {
		if s, ok := o.(track.Sink); ok {
			sinks = append(sinks, s)
		}
	}
	if cfg.Resources {
		sinks = append(sinks, references.NewNotSentLog(log, p.References, later))
	}
	sinks = append(sinks, cfg.Sinks...)
	detect := cfg.Detect
	detect.Resources = detect.Resources || cfg.Resources
	p.Tracker = track.New(detect)
	// Each output that reads what the tracker kept of a push takes it on
	// its own, before any stream: tracing the Istio objects of what each
	// push changed, the retained configuration what each ACK accepted, the
	// reference check that and what the tracker assumes applied.
	if p.Tracing != nil {
		p.Tracing.Take(p.Tracker)
	}
	if p.Retained != nil {
		p.Retained.Take(p.Tracker)
	}
	if p.References != nil {
		p.References.Take(p.Tracker)
	}
	p.Metrics.WatchKept(p.Tracker.Kept)
	p.Metrics.WatchStreams(p.Tracker)
	p.tracking = NewObserver(p.Tracker, sinks...)
	if p.References != nil {
		p.tracking.tickers = append(p.tracking.tickers, p.References.Tick)
	}
	if p.Tracing != nil {
		p.tracking.tickers = append(p.tracking.tickers, p.Tracing.Tick)
	}
	observers := []tap.Observer{p.tracking}
	if p.Capture != nil {
		observers = append(observers, captureObserver{p.Capture})
	}
	p.tapObserver = tap.Observers(observers...)
	return p, nil
}

// watch gives the tracker its one-second clock and makes the metrics read
// the relay counters of srv, the tap this pipeline observes.
func (p *Pipeline) watch(srv *tap.Server) {
	p.relay.Store(srv)
	p.Metrics.WatchObserveQueue(func() int64 { return srv.ObserveQueue().Bytes }, func() uint64 { return srv.ObserveQueue().OverBound })
	p.Metrics.WatchConnectReports(srv.DroppedConnectReports)
	p.stop = p.tracking.startClock(time.Second)
}

// Tick runs the time-based rules once at now, as the one-second clock does
// (push timeouts, the end of storms, references' grace): a test that must
// see the end of a window need not wait for it.
func (p *Pipeline) Tick(now time.Time) { p.tracking.Tick(now) }

func (p *Pipeline) refused() tap.Refused {
	if srv := p.relay.Load(); srv != nil {
		return srv.Refused()
	}
	return tap.Refused{}
}

func (p *Pipeline) relayStats() map[codec.Protocol]codec.ProtocolStats {
	if srv := p.relay.Load(); srv != nil {
		return srv.Stats()
	}
	return nil
}

// Pages are the admin pages the pipeline serves, by http.ServeMux pattern:
// the live page at /, /metrics, /debug/streams, /debug/pushes and
// /debug/config (which, unless resources are retained, says how to retain them).
func (p *Pipeline) Pages() map[string]http.Handler {
	pages := map[string]http.Handler{
		"GET /debug/streams":   page.StreamsHandler(p.Tracker, p.Upstream),
		"GET /debug/pushes":    page.PushesHandler(p.Tracker),
		"GET /debug/config":    retained.Off(),
		"GET /debug/resources": csds.ResourcesHandler(p.Tracker),
		"GET /metrics":         p.Metrics.Handler(),
	}
	if p.Retained != nil {
		pages["GET /debug/config"] = p.Retained.Handler()
	}
	if p.References != nil {
		pages["GET /debug/streams"] = page.StreamsHandler(p.Tracker, p.Upstream, p.References)
	}
	if p.Capture != nil {
		pages["GET /debug/capture"], pages["GET /debug/capture/{file}"] = recorder.Files(p.captureFile)
	}
	for pattern, h := range page.Handlers() {
		pages[pattern] = h
	}
	return pages
}

// close stops the clock and writes out what the outputs hold — capture
// records, retained pushes, spans — until ctx is done; past it the rest is
// dropped and counted. It is called after the tap has stopped, so every
// stream's end is observed.
func (p *Pipeline) close(ctx context.Context) error {
	p.stop()
	var errs []error
	for _, o := range slices.Backward(p.outputs) {
		if err := o.Close(ctx); err != nil {
			errs = append(errs, err) // it names its output
		}
	}
	return errors.Join(errs...)
}
