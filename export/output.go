package export

import (
	"context"
	"log/slog"
)

// Output is the one shape of every output: a name (its queue's, and the
// output label of adstap_output_dropped_total), what it dropped since it
// was made, and a Close that writes out what waits until ctx is done, whose
// error begins with the output's name. Each is made by its package's
// New(Config), whose Config embeds OutputConfig. What it reads — the
// tracker's events (track.Sink) or the relay's frames — it takes besides.
//
// An output with no queue of its own (the metrics, the upstream's health)
// handles each event on the goroutine that tells it: it cannot fall
// behind, so it drops nothing (Dropped is 0), and its Close has nothing to
// write out (nil).
type Output interface {
	Name() string
	Dropped() uint64
	Close(ctx context.Context) error
}

// The outputs' names, defined once: queues, loss messages and metric labels
// all read them from here.
const (
	LogOutput        = "log"
	ConfigOutput     = "config"
	ReferencesOutput = "references"
	CaptureOutput    = "capture"
	TracingOutput    = "tracing"
	MetricsOutput    = "metrics"
	UpstreamOutput   = "upstream"
)

// SpanDrops are the spans that never reached the collector, by why: the
// tracing output counts them, the metrics say them.
type SpanDrops struct {
	QueueFull    uint64 // the span queue was full: the collector is slow or unreachable
	ExportFailed uint64 // the collector refused them or did not answer in time
	TraceLimit   uint64 // past --trace-max-spans-per-stream in a trace, with no episode to fold into
}

// OutputConfig is what every output's config embeds: one
// --output-queue-bytes, one logger, the same for all.
type OutputConfig struct {
	// Logger is told of losses and failures; nil discards. (The live
	// log's lines are its own: they go to it.)
	Logger *slog.Logger
	// QueueBytes bounds the work waiting for the output
	// (DefaultOutputQueueBytes when 0); past it work is dropped and counted.
	// An output with no queue of its own leaves it unused.
	QueueBytes int64
}
