package runconfig

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/tap"
)

// Check fails when a flag that only means something with another one was
// given without it: a setting that would silently do nothing. isSet says
// whether a flag was given (on the command line or by its twin).
func (f *Flags) Check(isSet func(name string) bool) error {
	needs := func(flagName, needed string, present bool) error {
		if isSet(flagName) && !present {
			return fmt.Errorf("--%s needs --%s", flagName, needed)
		}
		return nil
	}
	return errors.Join(
		needs("retain-max-bytes", "retain-resources", f.RetainResources),
		needs("metrics-max-nodes", "metrics-node-label", f.MetricsNodeLabel),
		needs("capture-max-bytes", "capture", f.CapturePath != ""),
		needs("capture-max-files", "capture", f.CapturePath != ""),
		needs("references-grace", "check-references", f.CheckReferences),
	)
}

// Env is what a running tap gets from outside its flags.
type Env struct {
	// Logger is the tap's log (NewLog); LogOut, when set, is the writer
	// behind it, whose drops the metrics count.
	Logger *slog.Logger
	LogOut *export.LogWriter
	// Version is adstap's version, shown by the metrics, the spans and the
	// capture files.
	Version string
	// Getenv reads the OTEL_* variables tracing honours (nil: none).
	Getenv func(string) string
}

// Build turns `adstap run`'s flags into the configuration pipeline.Start
// runs. Everything that can be wrong with the flags fails here, before
// anything listens; its errors are all about the flags (a usage error). It
// opens the capture file when there is one: the pipeline closes it.
func Build(f Flags, env Env) (pipeline.RunConfig, error) {
	if f.Upstream == "" {
		return pipeline.RunConfig{}, errors.New("--upstream is required: the control plane's host:port, e.g. istiod.istio-system.svc:15012")
	}
	upstream, err := tap.ParseAddress(f.Upstream)
	if err != nil {
		return pipeline.RunConfig{}, fmt.Errorf("--upstream: %v", err)
	}
	listen, err := tap.ParseAddress(f.Listen)
	if err != nil {
		return pipeline.RunConfig{}, fmt.Errorf("--listen: %v", err)
	}
	cfg := tap.Config{
		Upstream:          upstream,
		MaxMessageSize:    int(f.MaxMessageSize),
		UpstreamKeepalive: f.UpstreamKeepalive,
		ObserveQueueBytes: int64(f.ObserveQueueBytes),
		ObserveWorkers:    f.ObserveWorkers,
		Logger:            env.Logger,

		MaxConcurrentStreams:    f.MaxConcurrentStreams,
		MaxStreamsPerConnection: f.MaxStreamsPerConnection,
		MaxPendingConnections:   f.MaxPendingConns,
	}
	if int64(f.MaxMessageSize) > int64(^uint32(0)>>1) {
		return pipeline.RunConfig{}, fmt.Errorf("--max-message-size %s: gRPC messages are at most 2GiB", f.MaxMessageSize.String())
	}
	if f.ListenCert != "" || f.ListenKey != "" || f.ListenClientCA != "" {
		if cfg.ListenTLS, err = tap.ListenTLSConfig(f.ListenCert, f.ListenKey, f.ListenClientCA); err != nil {
			return pipeline.RunConfig{}, fmt.Errorf("--listen-cert/--listen-key/--listen-client-ca: %v", err)
		}
	}
	if f.UpstreamTLS || f.UpstreamCA != "" || f.UpstreamServerName != "" || f.UpstreamCert != "" || f.UpstreamKey != "" {
		serverName := f.UpstreamServerName
		if serverName == "" && upstream.Network == "tcp" {
			// What gRPC would check anyway; said here because an IP address
			// is never sent as SNI, and the reloadable CA check needs a name.
			serverName, _, _ = net.SplitHostPort(upstream.Addr)
		}
		if cfg.UpstreamTLS, err = tap.UpstreamTLSConfig(f.UpstreamCA, serverName, f.UpstreamCert, f.UpstreamKey); err != nil {
			return pipeline.RunConfig{}, fmt.Errorf("--upstream-ca/--upstream-cert/--upstream-key: %v", err)
		}
	}
	if f.TraceGrouping != tracing.GroupByVersion && f.TraceGrouping != tracing.GroupByStream {
		return pipeline.RunConfig{}, fmt.Errorf("--trace-grouping %q: want version or stream", f.TraceGrouping)
	}
	detect := f.Detect
	detect.KeepBytes = int64(f.NACKKeepBytes.ByteSize)
	if detect.KeepBytes == 0 {
		detect.KeepBytes = -1 // --nack-keep-bytes=0 keeps none; track.Config's zero is its default
	}
	getenv := env.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	pcfg := pipeline.Config{
		Logger:           env.Logger,
		Version:          env.Version,
		Detect:           detect,
		MetricsNodeLabel: f.MetricsNodeLabel,
		MetricsMaxNodes:  f.MetricsMaxNodes,
		OutputQueueBytes: int64(f.OutputQueueBytes),
		CheckReferences:  f.CheckReferences,
		ReferencesGrace:  f.ReferencesGrace,
		Tracing: &tracing.Config{
			Endpoint: f.OTLPEndpoint, Scope: f.TraceScope, Grouping: f.TraceGrouping, Getenv: getenv,
			MaxSpansPerStream: f.TraceMaxSpansPerStream,
		},
	}
	pcfg.LogWriter = env.LogOut
	if f.RetainResources {
		pcfg.RetainMaxBytes = int64(f.RetainMaxBytes)
	}
	if f.CapturePath != "" {
		if pcfg.Capture, err = capture.NewWriter(f.CapturePath, int64(f.CaptureMaxBytes), f.CaptureMaxFiles, env.Version, upstream.String()); err != nil {
			return pipeline.RunConfig{}, fmt.Errorf("--capture: %v", err)
		}
	}
	run := pipeline.RunConfig{Tap: cfg, Observe: pcfg, Listen: listen, MetricsListen: f.MetricsListen}
	applyResources(f, &run)
	if f.Admin != "off" {
		run.Admin = f.Admin
	}
	if f.Pprof {
		run.AdminPages = map[string]http.Handler{
			"/debug/pprof/":        http.HandlerFunc(pprof.Index),
			"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
			"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
			"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
			"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
		}
	}
	return run, nil
}
