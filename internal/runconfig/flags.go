// Package runconfig is `adstap run`'s flag table — every flag's name,
// default, help and group, defined once — and the one function that turns
// those flags into the pipeline.RunConfig a tap runs with (Build). The
// command (cmd/adstap) adds the environment twins and the help around the
// table; the benchmark builds its tap from the same table's defaults, so
// that what is measured is what ships.
package runconfig

import (
	"flag"
	"fmt"
	"time"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/gctune"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// The defaults that belong to the command itself: where it listens and how
// it logs. Every other default is owned by the package that uses it.
const (
	DefaultListen    = "127.0.0.1:15100"
	DefaultAdmin     = "127.0.0.1:15101"
	DefaultLogLevel  = "info"
	DefaultLogFormat = "text"
)

// Flags are the values of `adstap run`'s flags. Define sets each to its
// default; a zero Flags is not a configuration.
type Flags struct {
	Listen, ListenCert, ListenKey, ListenClientCA                       string
	Upstream, UpstreamCA, UpstreamServerName, UpstreamCert, UpstreamKey string
	UpstreamTLS                                                         bool
	UpstreamKeepalive                                                   time.Duration
	Admin, MetricsListen                                                string
	MaxMessageSize                                                      ByteSize
	ObserveQueueBytes                                                   ByteSize
	DrainTimeout                                                        time.Duration
	LogLevel, LogFormat                                                 string
	Detect                                                              track.Config
	CSDSListen                                                          string
	InitialFetchTimeout                                                 time.Duration
	MetricsNodeLabel                                                    bool
	MetricsMaxNodes                                                     int
	OTLPEndpoint, TraceScope, TraceGrouping                             string
	TraceMaxSpansPerStream                                              int
	CapturePath                                                         string
	OutputQueueBytes                                                    ByteSize
	MaxConcurrentStreams, MaxStreamsPerConnection, MaxPendingConns      int
	ObserveWorkers                                                      int
	CaptureMaxBytes                                                     ByteSize
	CaptureMaxFiles                                                     int
	RetainResources                                                     bool
	RetainMaxBytes                                                      ByteSize
	NACKKeepBytes                                                       ByteSizeOrZero
	CheckReferences                                                     bool
	ReferencesGrace                                                     time.Duration
	Pprof                                                               bool
}

// Table is where flags are defined: cmd/adstap's command (with environment
// twins and grouped help), or a plain flag.FlagSet (FlagSet). Group starts
// a section of the help; the flags defined after it belong to it.
type Table interface {
	Group(title string)
	String(p *string, name, value, help string)
	Bool(p *bool, name string, value bool, help string)
	Var(v flag.Value, name, help string)
}

// FlagSet is a Table of a plain flag.FlagSet, without groups: Defaults'.
func FlagSet(fs *flag.FlagSet) Table { return flagSet{fs} }

type flagSet struct{ fs *flag.FlagSet }

func (flagSet) Group(string)                                 {}
func (s flagSet) String(p *string, name, value, help string) { s.fs.StringVar(p, name, value, help) }
func (s flagSet) Bool(p *bool, name string, value bool, help string) {
	s.fs.BoolVar(p, name, value, help)
}
func (s flagSet) Var(v flag.Value, name, help string) { s.fs.Var(v, name, help) }

// Defaults are the flags of `adstap run` given none: each its default.
func Defaults() Flags {
	var f Flags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	Define(FlagSet(fs), &f)
	return f
}

// Define defines every flag of `adstap run` in t, in the order and groups
// of its help, and sets f's fields to their defaults. A new flag of `adstap
// run` is a field of Flags, a line here, and its use in Build (and, when it
// needs another flag, in Check).
func Define(t Table, f *Flags) {
	t.Group("Listener (where proxies connect)")
	t.String(&f.Listen, "listen", DefaultListen, "address to accept xDS clients on: `host:port` or unix:///path/to/socket")
	t.String(&f.ListenCert, "listen-cert", "", "serve TLS with this PEM certificate `file` (reloaded when it changes)")
	t.String(&f.ListenKey, "listen-key", "", "PEM private key `file` for --listen-cert")
	t.String(&f.ListenClientCA, "listen-client-ca", "", "require client certificates signed by this PEM CA `file` (mTLS)")

	t.Group("Upstream (the control plane)")
	t.String(&f.Upstream, "upstream", "", "control plane address, required: `host:port` (istiod: istiod.istio-system.svc:15012) or unix:///path")
	t.Bool(&f.UpstreamTLS, "upstream-tls", false, "dial the upstream with TLS (implied by the other --upstream-* TLS flags)")
	t.String(&f.UpstreamCA, "upstream-ca", "", "trust this PEM CA `file` for the upstream (Istio: root-cert.pem of the istio-ca-root-cert ConfigMap); default: system roots")
	t.String(&f.UpstreamServerName, "upstream-server-name", "", "`name` expected in the upstream's certificate (istiod: istiod.istio-system.svc)")
	t.String(&f.UpstreamCert, "upstream-cert", "", "client certificate PEM `file` for upstream mTLS")
	t.String(&f.UpstreamKey, "upstream-key", "", "client private key PEM `file` for upstream mTLS")
	f.UpstreamKeepalive = tap.DefaultUpstreamKeepalive
	t.Var(Duration(&f.UpstreamKeepalive), "upstream-keepalive", "ping the upstream after this idle `duration`, as istio-agent does")

	t.Group("Relay")
	f.MaxMessageSize = tap.DefaultMaxMessageSize
	t.Var(&f.MaxMessageSize, "max-message-size", "largest message relayed in either direction, in `bytes` (e.g. 512MiB); larger ones fail with ResourceExhausted")
	f.ObserveQueueBytes = tap.DefaultObserveQueueBytes
	t.Var(&f.ObserveQueueBytes, "observe-queue-bytes", "`bytes` of frames that may wait for observation; past it frames are relayed unobserved and counted")
	t.Var(CountOrZero(&f.ObserveWorkers), "observe-workers", "goroutines (`count`) that observe the frames of every stream, each stream by one at a time; 0: as many as the cores Go runs on (GOMAXPROCS)")
	f.NACKKeepBytes = ByteSizeOrZero{track.DefaultKeepBytes}
	t.Var(&f.NACKKeepBytes, "nack-keep-bytes", "`bytes` of unanswered pushes kept (what each changed since the last ACK, copied, or the whole push, by reference) so that a NACK can name the resources and Istio objects it rejected, and with --retain-resources or --check-references until /debug/config and the reference check have what an ACK accepted; past it such a NACK says its push was not kept, /debug/config that it is incomplete, and the reference check stops checking the push's stream; 0 keeps none")
	f.MaxConcurrentStreams = tap.DefaultMaxConcurrentStreams
	t.Var(Count(&f.MaxConcurrentStreams), "max-concurrent-streams", "streams (`count`) open at once over every connection; more end with ResourceExhausted, counted in adstap_refused_total")
	f.MaxStreamsPerConnection = tap.DefaultMaxStreamsPerConnection
	t.Var(Count(&f.MaxStreamsPerConnection), "max-streams-per-connection", "streams (`count`) open at once on one client connection; more end with ResourceExhausted")
	f.MaxPendingConns = tap.DefaultMaxPendingConnections
	t.Var(Count(&f.MaxPendingConns), "max-pending-connections", "connections (`count`) accepted but yet to send their first bytes; more are closed at once, counted in adstap_refused_total")
	f.DrainTimeout = pipeline.DefaultDrainTimeout
	t.Var(Duration(&f.DrainTimeout), "drain-timeout", "on SIGTERM, end streams with Unavailable and exit within this `duration`")

	t.Group("Admin (health, readiness, metrics, debug pages)")
	t.String(&f.Admin, "admin", DefaultAdmin, "admin HTTP `host:port` serving the live page at /, /healthz, /readyz, /metrics, /debug/streams (and /debug/config, /debug/capture when on); \"off\" disables it")
	t.String(&f.MetricsListen, "metrics-listen", "", "also serve /metrics, and nothing else, on this `host:port` (e.g. 0.0.0.0:15102), for Prometheus to scrape from outside the pod while --admin, with the pages, captures and configuration, stays on loopback; \"\" serves none")
	t.Bool(&f.MetricsNodeLabel, "metrics-node-label", false, "add the node id as a label to per-type metrics; for a debugging tap in front of a few proxies, never for a fleet (an unbounded label can take Prometheus down)")
	f.MetricsMaxNodes = metrics.DefaultMaxNodes
	t.Var(Count(&f.MetricsMaxNodes), "metrics-max-nodes", "with --metrics-node-label, at most this many distinct nodes (`count`) get a label of their own; the rest are node=\"other\"")
	t.Bool(&f.Pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the admin address (off by default: it exposes the process)")

	t.Group("Tracing (OpenTelemetry; the standard OTEL_EXPORTER_OTLP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER variables apply)")
	t.String(&f.OTLPEndpoint, "otlp-endpoint", "", "send spans over OTLP to this `URL` (e.g. http://jaeger:4317); without it or OTEL_EXPORTER_OTLP_ENDPOINT, tracing is off")
	t.String(&f.TraceGrouping, "trace-grouping", tracing.GroupByVersion, "`mode`: version puts every push round, across streams and taps, in one trace: a full push by its version, an incremental one by its version, type and content (istiod, whose released versions reuse a full push's version for incremental pushes); stream puts a stream's pushes under its connect span (control planes whose versions repeat, like go-control-plane's \"1\")")
	t.String(&f.TraceScope, "trace-scope", "", "a `name` (e.g. the mesh id) mixed into version-derived trace ids, so meshes sharing a collector do not share traces")
	f.TraceMaxSpansPerStream = tracing.DefaultMaxSpansPerStream
	t.Var(Count(&f.TraceMaxSpansPerStream), "trace-max-spans-per-stream", "at most this many push spans (`count`) per stream in one trace; past it the stream's pushes fold into an episode span of a trace of its own (repeats fold anyway: docs/tracing.md), counted in adstap_spans_folded_total")

	t.Group("Capture and retained configuration (secrets are always redacted)")
	t.String(&f.CapturePath, "capture", "", "append every frame to this `file` (a JSON line per record, a frame's message raw after it: docs/capture.md); private keys and bearer tokens are replaced by their fingerprints; the admin address serves the files at /debug/capture")
	f.CaptureMaxBytes = capture.DefaultMaxBytes
	t.Var(&f.CaptureMaxBytes, "capture-max-bytes", "rotate the capture file when it reaches this many `bytes` (FILE becomes FILE.1, ...)")
	f.CaptureMaxFiles = capture.DefaultMaxFiles
	t.Var(Count(&f.CaptureMaxFiles), "capture-max-files", "keep at most this many capture files (`count`), the current one included")

	f.OutputQueueBytes = export.DefaultOutputQueueBytes
	t.Var(&f.OutputQueueBytes, "output-queue-bytes", "`bytes` of capture records, of pushes to retain, and of frames whose references are to be checked, that may wait for each of those outputs; past it they are dropped and counted (adstap_output_dropped_total), never waited for")
	t.Bool(&f.RetainResources, "retain-resources", false, "keep the resources each client accepted, for /debug/config (decoded, secrets redacted); otherwise only hashes are kept")
	f.RetainMaxBytes = retained.DefaultMaxBytes
	t.Var(&f.RetainMaxBytes, "retain-max-bytes", "with --retain-resources, keep at most this many `bytes` of resources; past it /debug/config says it is incomplete")

	t.Group("Dangling references (what each proxy accepted that refers to something it does not have)")
	t.Bool(&f.CheckReferences, "check-references", true, "keep each stream's reference graph (names only) and report, after every ACK, routes and TCP proxies to clusters the proxy does not have, listeners without their route configuration, EDS clusters without (healthy) endpoints, secrets never received (docs/istio.md)")
	f.ReferencesGrace = references.DefaultGrace
	t.Var(Duration(&f.ReferencesGrace), "references-grace", "how long a proxy may wait for what it refers to (a listener's route configuration, a cluster's endpoints, a secret) before the wait is reported; Envoy's initial_fetch_timeout by default")

	defineResources(t, f)
	DefineDetectors(t, &f.Detect)

	t.Group("Logging")
	t.String(&f.LogLevel, "log-level", DefaultLogLevel, "`level`: debug, info, warn or error")
	t.String(&f.LogFormat, "log-format", DefaultLogFormat, "`format` of the log on stderr: text or json")
}

// DefineDetectors defines the tracker's thresholds in t, with its defaults
// (track.DefaultConfig): `adstap run`'s and `adstap inspect`'s.
func DefineDetectors(t Table, cfg *track.Config) {
	*cfg = track.DefaultConfig()
	t.Group("Detectors (what the live log and /debug/streams call a problem)")
	t.Var(Duration(&cfg.PushTimeout), "push-timeout", "a push unanswered for this `duration` is reported as timed out (state STALE)")
	t.Var(Count(&cfg.NACKStormThreshold), "nack-storm-threshold", "a NACK storm is this many NACKs (`count`) of one stream and type within --nack-storm-window")
	t.Var(Duration(&cfg.NACKStormWindow), "nack-storm-window", "the `duration` over which NACKs are counted for a storm")
	t.Var(Count(&cfg.NACKLoopThreshold), "nack-loop-threshold", "a NACK loop is the same rejected content pushed and NACKed this many times (`count`) in a row")
	t.Var(Count(&cfg.RepeatedFullSyncLimit), "full-sync-limit", "alarm when a node gets more than this many repeated full syncs (`count`; not counting a reconnect's initial sync) within --full-sync-window")
	t.Var(Duration(&cfg.RepeatedFullSyncWindow), "full-sync-window", "the `duration` over which repeated full syncs are counted")
	t.Var(Count(&cfg.HerdThreshold), "herd-threshold", "a reconnect herd is this many new streams (`count`) across the tap within --herd-window")
	t.Var(Duration(&cfg.HerdWindow), "herd-window", "the `duration` over which new streams are counted for a herd")
	t.Var(Duration(&cfg.FullSyncSettle), "full-sync-settle", "a stream's full sync is complete once every type it asked for is ACKed and no new type is asked for within this `duration`")
}

// Epilog is what follows the flags in `adstap run --help`: the Go
// variables that set its memory up.
func Epilog() string {
	return fmt.Sprintf(`Memory (Go's own variables):
  GOGC
      garbage collection percent; adstap defaults to %d (Go's default is 100): pushes leave short-lived garbage, and fewer collections keep them from waiting on one; past %d MiB of live heap and stacks (thousands of streams) it lowers it towards 100, so the extra headroom stays %d MiB; while streams arrive by the dozen it is 50, so that what they keep is not strewn among the garbage of their syncs
  GOMEMLIMIT
      soft memory limit; adstap defaults to %.0f%% of the container's memory limit (cgroup memory.max), so collecting less often never gets it killed
`, gctune.DefaultPercent, gctune.ExtraHeadroom>>20, gctune.ExtraHeadroom>>20, gctune.LimitShare*100)
}
