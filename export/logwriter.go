package export

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/adstap/adstap/export/internal/outq"
)

// DefaultOutputQueueBytes bounds the work waiting for each output that does
// I/O (the capture file, stderr, /debug/config) when none is set.
const DefaultOutputQueueBytes = outq.DefaultBytes

// LogWriter is where the log goes (stderr): a Write copies the line and
// returns at once, and a goroutine of its own writes it out. A stderr that
// blocks — a terminal paused, a pipe nobody reads — costs log lines, counted
// and said once stderr takes lines again, never a wait on the relay or the
// tracker.
//
// It is the way out of the log output (livelog.Log, named LogOutput), not
// an Output of its own: the live log reports its dropped lines. It carries
// every logger of the process, not only the live log's lines, so its owner
// closes it after the last of them (adstap run's "stopped"), after the
// pipeline's outputs.
type LogWriter struct {
	q *outq.Queue[logItem]
	// out gathers the lines of a batch for one write (logLinger); only the
	// queue's goroutine touches it.
	out []byte
}

// logLinger is how long the writer gathers lines before it writes them:
// a tap in front of istiod logs a line a push, thousands a second, and a
// write each was a wake-up of the writer and of whoever reads stderr (the
// container runtime, a terminal) each. A line is out within this of its
// logging, unnoticed by whoever reads it.
const logLinger = 10 * time.Millisecond

// maxLogBatch is the most the writer gathers before it writes.
const maxLogBatch = 64 << 10

// logItem is a line to write, or work that logs lines (Later).
type logItem struct {
	line  *[]byte
	later func()
}

// lines holds the buffers of lines written out, for the next lines: a
// copy of each line was a tenth of what a tap allocated beyond the relay's
// under a steady stream of small pushes.
var lines sync.Pool

// maxPooledLine is the largest buffer kept for another line: a line that
// lists thousands of names does not stay held for the short ones.
const maxPooledLine = 4 << 10

func getLine(p []byte) *[]byte {
	b, _ := lines.Get().(*[]byte)
	if b == nil {
		b = new([]byte)
	}
	*b = append((*b)[:0], p...)
	return b
}

func putLine(b *[]byte) {
	if cap(*b) <= maxPooledLine {
		lines.Put(b)
	}
}

// laterSize is what a Later counts against the bound: about the line it
// makes.
const laterSize = 512

// LogWriterConfig shapes the log writer. Its OutputConfig's Logger is
// unused: the writer is the log's own way out.
type LogWriterConfig struct {
	// OutputConfig.QueueBytes bounds the lines that wait.
	OutputConfig
	// Writer is where the lines go (stderr).
	Writer io.Writer
	// Lost builds the line that says, once Writer keeps up again, how many
	// lines were dropped; nil says it in plain text.
	Lost func(n uint64) []byte
}

// NewLogWriter writes to cfg.Writer.
func NewLogWriter(cfg LogWriterConfig) *LogWriter {
	w, lost, maxBytes := cfg.Writer, cfg.Lost, cfg.QueueBytes
	if lost == nil {
		lost = func(n uint64) []byte {
			return fmt.Appendf(nil, "adstap: %d log lines dropped while the log's output was blocked (adstap_output_dropped_total{output=\"log\"})\n", n)
		}
	}
	l := &LogWriter{}
	flush := func() {
		if len(l.out) > 0 {
			w.Write(l.out)
			l.out = l.out[:0]
		}
	}
	l.q = outq.NewBatched(LogOutput, maxBytes, func(it logItem) {
		if it.later != nil {
			flush()
			it.later()
			return
		}
		switch line := *it.line; {
		case len(line) > maxLogBatch:
			flush()
			w.Write(line)
		case len(l.out)+len(line) > maxLogBatch:
			flush()
			fallthrough
		default:
			l.out = append(l.out, line...)
		}
		putLine(it.line)
	}, func(n uint64) { w.Write(lost(n)) }, nil, outq.Batch{Linger: logLinger, Drained: flush})
	return l
}

// Write queues a copy of p, or drops it when too much waits already.
func (l *LogWriter) Write(p []byte) (int, error) {
	if b := getLine(p); !l.q.Put(logItem{line: b}, len(p), false) {
		putLine(b)
	}
	return len(p), nil
}

// Later runs f on the writer's goroutine, after the lines queued before it,
// or drops it (counted as a line) when too much waits already; it reports
// whether f was queued. The lines f logs through this writer come after
// those queued before f ran: work whose lines need something slow (the
// Istio objects a NACK rejected, livelog.Config.Writer) runs here rather
// than on the tracker's goroutine.
func (l *LogWriter) Later(f func()) bool {
	return l.q.Put(logItem{later: f}, laterSize, false)
}

// Dropped counts the lines dropped, of every logger that writes here.
func (l *LogWriter) Dropped() uint64 { return l.q.Dropped() }

// Close writes out what waits, until ctx is done; later lines are dropped.
func (l *LogWriter) Close(ctx context.Context) error { return l.q.Close(ctx) }
