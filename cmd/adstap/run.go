package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"bytes"
	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/gctune"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

type runFlags struct {
	listen, listenCert, listenKey, listenClientCA                       string
	upstream, upstreamCA, upstreamServerName, upstreamCert, upstreamKey string
	upstreamTLS                                                         bool
	upstreamKeepalive                                                   time.Duration
	admin, metricsListen                                                string
	maxMessageSize                                                      byteSize
	observeQueueBytes                                                   byteSize
	drainTimeout                                                        time.Duration
	logLevel, logFormat                                                 string
	detect                                                              track.Config
	metricsNodeLabel                                                    bool
	metricsMaxNodes                                                     int
	otlpEndpoint, traceScope, traceGrouping                             string
	capturePath                                                         string
	outputQueueBytes                                                    byteSize
	maxConcurrentStreams, maxStreamsPerConnection, maxPendingConns      int
	observeWorkers                                                      int
	captureMaxBytes                                                     byteSize
	captureMaxFiles                                                     int
	retainResources                                                     bool
	retainMaxBytes                                                      byteSize
	nackKeepBytes                                                       byteSize
	checkReferences                                                     bool
	referencesGrace                                                     time.Duration
	pprof                                                               bool
	resources                                                           resourceFlags
}

func runCommand(f *runFlags) *command {
	c := newCommand("run",
		"adstap run relays every xDS stream between its clients and one upstream control plane, byte for byte, and observes it.",
		"adstap run --upstream=HOST:PORT [flags]")

	c.group("Listener (where proxies connect)")
	c.String(&f.listen, "listen", "127.0.0.1:15100", "address to accept xDS clients on: `host:port` or unix:///path/to/socket")
	c.String(&f.listenCert, "listen-cert", "", "serve TLS with this PEM certificate `file` (reloaded when it changes)")
	c.String(&f.listenKey, "listen-key", "", "PEM private key `file` for --listen-cert")
	c.String(&f.listenClientCA, "listen-client-ca", "", "require client certificates signed by this PEM CA `file` (mTLS)")

	c.group("Upstream (the control plane)")
	c.String(&f.upstream, "upstream", "", "control plane address, required: `host:port` (istiod: istiod.istio-system.svc:15012) or unix:///path")
	c.Bool(&f.upstreamTLS, "upstream-tls", false, "dial the upstream with TLS (implied by the other --upstream-* TLS flags)")
	c.String(&f.upstreamCA, "upstream-ca", "", "trust this PEM CA `file` for the upstream (Istio: root-cert.pem of the istio-ca-root-cert ConfigMap); default: system roots")
	c.String(&f.upstreamServerName, "upstream-server-name", "", "`name` expected in the upstream's certificate (istiod: istiod.istio-system.svc)")
	c.String(&f.upstreamCert, "upstream-cert", "", "client certificate PEM `file` for upstream mTLS")
	c.String(&f.upstreamKey, "upstream-key", "", "client private key PEM `file` for upstream mTLS")
	f.upstreamKeepalive = tap.DefaultUpstreamKeepalive
	c.Var(durationValue{&f.upstreamKeepalive}, "upstream-keepalive", "ping the upstream after this idle `duration`, as istio-agent does")

	c.group("Relay")
	f.maxMessageSize = tap.DefaultMaxMessageSize
	c.Var(&f.maxMessageSize, "max-message-size", "largest message relayed in either direction, in `bytes` (e.g. 512MiB); larger ones fail with ResourceExhausted")
	f.observeQueueBytes = tap.DefaultObserveQueueBytes
	c.Var(&f.observeQueueBytes, "observe-queue-bytes", "`bytes` of frames that may wait for observation; past it frames are relayed unobserved and counted")
	c.Var(intValue{&f.observeWorkers}, "observe-workers", "goroutines (`count`) that observe the frames of every stream, each stream by one at a time; 0: as many as the cores Go runs on (GOMAXPROCS)")
	f.nackKeepBytes = track.DefaultKeepBytes
	c.Var(&f.nackKeepBytes, "nack-keep-bytes", "`bytes` of unanswered pushes kept (what each changed since the last ACK, copied, or the whole push, by reference) so that a NACK can name the resources and Istio objects it rejected, and with --retain-resources or --check-references until /debug/config and the reference check have what an ACK accepted; past it such a NACK says its push was not kept, /debug/config that it is incomplete, and the reference check stops checking the push's stream; 0 keeps none")
	f.maxConcurrentStreams = tap.DefaultMaxConcurrentStreams
	c.Var(intValue{&f.maxConcurrentStreams}, "max-concurrent-streams", "streams (`count`) open at once over every connection; more end with ResourceExhausted, counted in adstap_refused_total")
	f.maxStreamsPerConnection = tap.DefaultMaxStreamsPerConnection
	c.Var(intValue{&f.maxStreamsPerConnection}, "max-streams-per-connection", "streams (`count`) open at once on one client connection; more end with ResourceExhausted")
	f.maxPendingConns = tap.DefaultMaxPendingConnections
	c.Var(intValue{&f.maxPendingConns}, "max-pending-connections", "connections (`count`) accepted but yet to send their first bytes; more are closed at once, counted in adstap_refused_total")
	f.drainTimeout = 10 * time.Second
	c.Var(durationValue{&f.drainTimeout}, "drain-timeout", "on SIGTERM, end streams with Unavailable and exit within this `duration`")

	c.group("Admin (health, readiness, metrics, debug pages)")
	c.String(&f.admin, "admin", "127.0.0.1:15101", "admin HTTP `host:port` serving the live page at /, /healthz, /readyz, /metrics, /debug/streams (and /debug/config, /debug/capture when on); \"off\" disables it")
	c.String(&f.metricsListen, "metrics-listen", "", "also serve /metrics, and nothing else, on this `host:port` (e.g. 0.0.0.0:15102), for Prometheus to scrape from outside the pod while --admin, with the pages, captures and configuration, stays on loopback; \"\" serves none")
	c.Bool(&f.metricsNodeLabel, "metrics-node-label", false, "add the node id as a label to per-type metrics; for a debugging tap in front of a few proxies, never for a fleet (an unbounded label can take Prometheus down)")
	f.metricsMaxNodes = export.DefaultMaxNodes
	c.Var(intValue{&f.metricsMaxNodes}, "metrics-max-nodes", "with --metrics-node-label, at most this many distinct nodes (`count`) get a label of their own; the rest are node=\"other\"")
	c.Bool(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the admin address (off by default: it exposes the process)")

	c.group("Tracing (OpenTelemetry; the standard OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER variables apply)")
	c.String(&f.otlpEndpoint, "otlp-endpoint", "", "send spans over OTLP to this `URL` (e.g. http://jaeger:4317); without it or OTEL_EXPORTER_OTLP_ENDPOINT, tracing is off")
	c.String(&f.traceGrouping, "trace-grouping", export.GroupByVersion, "`mode`: version puts every push round, across streams and taps, in one trace: a full push by its version, an incremental one by its version, type and content (istiod, whose released versions reuse a full push's version for incremental pushes); stream puts a stream's pushes under its connect span (control planes whose versions repeat, like go-control-plane's \"1\")")
	c.String(&f.traceScope, "trace-scope", "", "a `name` (e.g. the mesh id) mixed into version-derived trace ids, so meshes sharing a collector do not share traces")

	c.group("Capture and retained configuration (secrets are always redacted)")
	c.String(&f.capturePath, "capture", "", "append every frame to this `file` (a JSON line per record, a frame's message raw after it: docs/capture.md); private keys and bearer tokens are replaced by their fingerprints; the admin address serves the files at /debug/capture")
	f.captureMaxBytes = capture.DefaultMaxBytes
	c.Var(&f.captureMaxBytes, "capture-max-bytes", "rotate the capture file when it reaches this many `bytes` (FILE becomes FILE.1, ...)")
	f.captureMaxFiles = capture.DefaultMaxFiles
	c.Var(intValue{&f.captureMaxFiles}, "capture-max-files", "keep at most this many capture files (`count`), the current one included")

	f.outputQueueBytes = export.DefaultOutputQueueBytes
	c.Var(&f.outputQueueBytes, "output-queue-bytes", "`bytes` of capture records, of pushes to retain, and of frames whose references are to be checked, that may wait for each of those outputs; past it they are dropped and counted (adstap_output_dropped_total), never waited for")
	c.Bool(&f.retainResources, "retain-resources", false, "keep the resources each client accepted, for /debug/config (decoded, secrets redacted); otherwise only hashes are kept")
	f.retainMaxBytes = 128 << 20
	c.Var(&f.retainMaxBytes, "retain-max-bytes", "with --retain-resources, keep at most this many `bytes` of resources; past it /debug/config says it is incomplete")

	c.group("Dangling references (what each proxy accepted that refers to something it does not have)")
	c.Bool(&f.checkReferences, "check-references", true, "keep each stream's reference graph (names only) and report, after every ACK, routes and TCP proxies to clusters the proxy does not have, listeners without their route configuration, EDS clusters without (healthy) endpoints, secrets never received (docs/istio.md)")
	f.referencesGrace = export.DefaultReferencesGrace
	c.Var(durationValue{&f.referencesGrace}, "references-grace", "how long a proxy may wait for what it refers to (a listener's route configuration, a cluster's endpoints, a secret) before the wait is reported; Envoy's initial_fetch_timeout by default")

	addResourceFlags(c, &f.resources)
	addDetectorFlags(c, &f.detect)

	c.group("Logging")
	c.String(&f.logLevel, "log-level", "info", "`level`: debug, info, warn or error")
	c.String(&f.logFormat, "log-format", "text", "`format` of the log on stderr: text or json")
	c.epilog = fmt.Sprintf(`Memory (Go's own variables):
  GOGC
      garbage collection percent; adstap defaults to %d (Go's default is 100): pushes leave short-lived garbage, and fewer collections keep them from waiting on one; past %d MiB of live heap and stacks (thousands of streams) it lowers it towards 100, so the extra headroom stays %d MiB
  GOMEMLIMIT
      soft memory limit; adstap defaults to %.0f%% of the container's memory limit (cgroup memory.max), so collecting less often never gets it killed
`, gctune.DefaultPercent, gctune.ExtraHeadroom>>20, gctune.ExtraHeadroom>>20, gctune.LimitShare*100)
	return c
}

// durationValue is a duration flag that must be positive.
type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil {
		return ""
	}
	return d.p.String()
}

func (d durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return errors.New("want a positive duration such as 30s or 2m")
	}
	*d.p = v
	return nil
}

// usageError is a problem with how adstap was started: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func runTap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f runFlags
	cmd := runCommand(&f)
	if code, done := cmd.parseArgs(args, stdout, stderr); done {
		return code
	}
	if err := errors.Join(
		cmd.needs("retain-max-bytes", "retain-resources", f.retainResources),
		cmd.needs("metrics-max-nodes", "metrics-node-label", f.metricsNodeLabel),
		cmd.needs("capture-max-bytes", "capture", f.capturePath != ""),
		cmd.needs("capture-max-files", "capture", f.capturePath != ""),
		cmd.needs("references-grace", "check-references", f.checkReferences),
	); err != nil {
		fmt.Fprintf(stderr, "adstap run: %v (see adstap run --help)\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return exitUsage
	}
	log, logOut, err := newLog(stderr, f.logLevel, f.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "adstap run: %v\n", err)
		return exitUsage
	}
	defer closeLog(logOut, time.Second) // after wait, which closes it within the drain
	gc := gctune.Apply(osEnv, gctune.SystemCgroup())
	defer gctune.Start(gc, time.Second)()
	t, err := startTap(f, log, logOut)
	if err != nil {
		fmt.Fprintf(stderr, "adstap run: %v\n", err)
		if errors.As(err, new(usageError)) {
			return exitUsage
		}
		return exitFailure
	}
	logGC(log, gc)
	return t.wait(ctx, f.drainTimeout)
}

// logGC says how the garbage collector was set, since it decides how much
// memory the tap may take (internal/gctune).
func logGC(log *slog.Logger, s gctune.Settings) {
	limit := "none"
	if s.MemoryLimit != math.MaxInt64 {
		b := byteSize(s.MemoryLimit)
		limit = b.String()
	}
	attrs := []any{"gc_percent", s.Percent, "gc_percent_from", s.PercentSource, "memory_limit", limit, "memory_limit_from", s.LimitSource}
	if s.PercentSource != "GOGC" {
		// The percent falls towards 100 past this much live heap and stacks.
		attrs = append(attrs, "gc_extra_headroom_mib", gctune.ExtraHeadroom>>20)
	}
	log.Info("garbage collector", attrs...)
}

// logQueueBytes bounds the log lines waiting for stderr.
const logQueueBytes = 4 << 20

// newLog is the tap's log on stderr, through an export.LogWriter: a stderr
// that blocks costs log lines, counted, never a wait in the relay or the
// tracker. Close the writer last (closeLog), to write out what waits.
func newLog(stderr io.Writer, level, format string) (*slog.Logger, *export.LogWriter, error) {
	if _, err := newLogger(io.Discard, level, format); err != nil {
		return nil, nil, err
	}
	out := export.NewLogWriter(stderr, logQueueBytes, func(n uint64) []byte {
		// Said in the log's own format, once stderr takes lines again.
		var b bytes.Buffer
		l, _ := newLogger(&b, level, format)
		l.Warn(fmt.Sprintf("log: %d lines dropped while stderr was blocked", n), "dropped", n, "metric", `adstap_output_dropped_total{output="log"}`)
		return b.Bytes()
	})
	log, _ := newLogger(out, level, format)
	return log, out, nil
}

// closeLog writes out the log lines that wait, for at most d.
func closeLog(out *export.LogWriter, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out.Close(ctx)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(export.NewPretty(w, lv)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// runningTap is a started tap: the relay, its observation, its listener
// and its admin and metrics servers (internal/pipeline), with the log.
type runningTap struct {
	*pipeline.Running
	log    *slog.Logger
	logOut *export.LogWriter // nil when the log is written in place
}

// startTap checks the configuration, opens every listener, and starts
// serving. Everything that can be wrong with the configuration fails here,
// before the first client connects.
func startTap(f runFlags, log *slog.Logger, logOut *export.LogWriter) (*runningTap, error) {
	if f.upstream == "" {
		return nil, usagef("--upstream is required: the control plane's host:port, e.g. istiod.istio-system.svc:15012")
	}
	upstream, err := tap.ParseAddress(f.upstream)
	if err != nil {
		return nil, usagef("--upstream: %v", err)
	}
	listen, err := tap.ParseAddress(f.listen)
	if err != nil {
		return nil, usagef("--listen: %v", err)
	}
	cfg := tap.Config{
		Upstream:          upstream,
		MaxMessageSize:    int(f.maxMessageSize),
		UpstreamKeepalive: f.upstreamKeepalive,
		ObserveQueueBytes: int64(f.observeQueueBytes),
		ObserveWorkers:    f.observeWorkers,
		Logger:            log,

		MaxConcurrentStreams:    f.maxConcurrentStreams,
		MaxStreamsPerConnection: f.maxStreamsPerConnection,
		MaxPendingConnections:   f.maxPendingConns,
	}
	if int64(f.maxMessageSize) > int64(^uint32(0)>>1) {
		return nil, usagef("--max-message-size %s: gRPC messages are at most 2GiB", f.maxMessageSize.String())
	}
	if f.listenCert != "" || f.listenKey != "" || f.listenClientCA != "" {
		if cfg.ListenTLS, err = tap.ListenTLSConfig(f.listenCert, f.listenKey, f.listenClientCA); err != nil {
			return nil, usagef("--listen-cert/--listen-key/--listen-client-ca: %v", err)
		}
	}
	if f.upstreamTLS || f.upstreamCA != "" || f.upstreamServerName != "" || f.upstreamCert != "" || f.upstreamKey != "" {
		serverName := f.upstreamServerName
		if serverName == "" && upstream.Network == "tcp" {
			// What gRPC would check anyway; said here because an IP address
			// is never sent as SNI, and the reloadable CA check needs a name.
			serverName, _, _ = net.SplitHostPort(upstream.Addr)
		}
		if cfg.UpstreamTLS, err = tap.UpstreamTLSConfig(f.upstreamCA, serverName, f.upstreamCert, f.upstreamKey); err != nil {
			return nil, usagef("--upstream-ca/--upstream-cert/--upstream-key: %v", err)
		}
	}
	if f.traceGrouping != export.GroupByVersion && f.traceGrouping != export.GroupByStream {
		return nil, usagef("--trace-grouping %q: want version or stream", f.traceGrouping)
	}
	f.detect.KeepBytes = int64(f.nackKeepBytes)
	if f.detect.KeepBytes == 0 {
		f.detect.KeepBytes = -1 // track.Config's zero is its default
	}
	pcfg := pipeline.Config{
		Logger:           log,
		Version:          currentBuild().Version,
		Detect:           f.detect,
		MetricsNodeLabel: f.metricsNodeLabel,
		MetricsMaxNodes:  f.metricsMaxNodes,
		OutputQueueBytes: int64(f.outputQueueBytes),
		CheckReferences:  f.checkReferences,
		ReferencesGrace:  f.referencesGrace,
		Tracing: &export.TracingConfig{
			Endpoint: f.otlpEndpoint, Scope: f.traceScope, Grouping: f.traceGrouping, Getenv: osEnv,
		},
	}
	if logOut != nil {
		pcfg.LogDropped = logOut.Dropped
		pcfg.LogLater = logOut.Later
	}
	if f.retainResources {
		pcfg.RetainMaxBytes = int64(f.retainMaxBytes)
	}
	if f.capturePath != "" {
		if pcfg.Capture, err = capture.NewWriter(f.capturePath, int64(f.captureMaxBytes), f.captureMaxFiles, currentBuild().Version, upstream.String()); err != nil {
			return nil, usagef("--capture: %v", err)
		}
	}
	run := pipeline.RunConfig{Tap: cfg, Observe: pcfg, Listen: listen, MetricsListen: f.metricsListen}
	f.resources.apply(&run)
	if f.admin != "off" {
		run.Admin = f.admin
	}
	if f.pprof {
		run.AdminPages = map[string]http.Handler{
			"/debug/pprof/":        http.HandlerFunc(pprof.Index),
			"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
			"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
			"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
			"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
		}
	}
	running, err := pipeline.Start(context.Background(), run)
	if err != nil {
		if le := (*pipeline.ListenError)(nil); errors.As(err, &le) {
			return nil, usagef("--%s: %v", listenFlags[le.Which], le.Err)
		}
		return nil, usagef("%v", err)
	}
	attrs := []any{"listen", running.Addr().String(), "upstream", upstream.String(), "upstream_tls", cfg.UpstreamTLS != nil, "listen_tls", cfg.ListenTLS != nil, "tracing", running.Tracing != nil}
	if a := running.AdminAddr(); a != "" {
		attrs = append(attrs, "admin", "http://"+a)
	}
	if a := running.MetricsAddr(); a != "" {
		attrs = append(attrs, "metrics", "http://"+a+"/metrics")
	}
	if a := running.CSDSAddr(); a != "" {
		attrs = append(attrs, "csds", a)
	}
	log.Info("adstap relaying", attrs...)
	return &runningTap{Running: running, log: log, logOut: logOut}, nil
}

// listenFlags name the flags of pipeline.RunConfig's listeners.
var listenFlags = map[string]string{"Listen": "listen", "Admin": "admin", "MetricsListen": "metrics-listen", "CSDSListen": "csds-listen"}

// wait serves until ctx ends, then drains: streams end with Unavailable so
// clients reconnect elsewhere, and the process exits within drainTimeout.
func (t *runningTap) wait(ctx context.Context, drainTimeout time.Duration) int {
	code := exitOK
	select {
	case <-t.Done():
		if err := t.Err(); err != nil {
			t.log.Error("serving stopped", "err", err)
			code = exitFailure
		}
	case <-ctx.Done():
		t.log.Info("draining: ending open streams so clients reconnect", "drain_timeout", drainTimeout)
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := t.Close(drainCtx); err != nil {
		t.log.Warn("observation did not stop cleanly", "err", err)
	}
	t.log.Info("stopped")
	if t.logOut != nil {
		// What the log still holds goes out within what is left of the drain.
		t.logOut.Close(drainCtx)
	}
	return code
}
