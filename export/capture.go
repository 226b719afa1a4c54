package export

import (
	"log/slog"
	"sync"

	"context"
	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
)

// Capture records every relayed frame to a capture file (docs/capture.md),
// after the shared redaction step: no private key or bearer token reaches
// the file. It is handed records as the relay saw them — headers and
// messages unredacted — and queues them; a goroutine of its own redacts and
// writes them, so neither redaction nor a slow disk or pipe ever holds up
// the relay or the tracker. Frames that do not fit in the queue are dropped,
// counted (adstap_output_dropped_total{output="capture"}) and marked in the
// file by a gap record.
type Capture struct {
	w   *capture.Writer
	log *slog.Logger
	q   *queue[capture.Record]

	// gaps counts, per stream, the frames dropped since its last queued
	// record: the next one is preceded by a gap record.
	gapMu sync.Mutex
	gaps  map[uint64]int

	// Used by the queue's goroutine only.
	streams map[uint64]capturedStream
	failed  bool
}

// capturedStream is what a frame's record needs from its stream's open.
type capturedStream struct {
	method   string
	protocol codec.Protocol
	node     string
}

// recordOverhead is what a record costs besides its message, for the
// queue's bound.
const recordOverhead = 256

// NewCapture records to w, with at most maxQueueBytes of records waiting
// (DefaultOutputQueueBytes when 0). Close it to write out what waits.
func NewCapture(w *capture.Writer, log *slog.Logger, maxQueueBytes int64) *Capture {
	c := &Capture{w: w, log: log, gaps: map[uint64]int{}, streams: map[uint64]capturedStream{}}
	c.q = newQueue("capture", maxQueueBytes, c.write, warnLost(log, "capture", "records"))
	return c
}

// Record queues r. r is a KindOpen, KindFrame, KindGap or KindClose record,
// unredacted; a frame's Message is the whole message as it crossed the tap,
// and Record owns it. It never waits: a frame that does not fit is dropped.
func (c *Capture) Record(r capture.Record) {
	if r.Kind != capture.KindFrame {
		// Small, and the file makes no sense without them.
		c.put(r, recordOverhead, true)
		return
	}
	c.put(r, len(r.Message)+recordOverhead, false)
}

func (c *Capture) put(r capture.Record, size int, must bool) {
	c.gapMu.Lock()
	defer c.gapMu.Unlock()
	if n := c.gaps[r.Stream]; n > 0 {
		if !c.q.put(capture.Record{Time: r.Time, Kind: capture.KindGap, Stream: r.Stream, Skipped: n}, recordOverhead, must) {
			if r.Kind == capture.KindFrame {
				c.gaps[r.Stream]++
			}
			return
		}
		delete(c.gaps, r.Stream)
	}
	if !c.q.put(r, size, must) && r.Kind == capture.KindFrame {
		c.gaps[r.Stream]++
	}
	if r.Kind == capture.KindClose {
		delete(c.gaps, r.Stream)
	}
}

// Dropped counts the records dropped because the queue was full.
func (c *Capture) Dropped() uint64 { return c.q.Dropped() }

// Close writes out the records that wait, until ctx is done, then closes the
// file. Past ctx the rest is dropped, and the file is closed once the write
// in hand returns, if ever.
func (c *Capture) Close(ctx context.Context) error {
	if err := c.q.close(ctx); err != nil {
		go func() {
			<-c.q.done
			c.w.Close()
		}()
		return err
	}
	return c.w.Close()
}

// write redacts r and writes it, on the queue's goroutine.
func (c *Capture) write(r capture.Record) {
	switch r.Kind {
	case capture.KindOpen:
		r.Headers = redact.Headers(r.Headers)
		c.streams[r.Stream] = capturedStream{method: r.Method, protocol: codec.Protocol(r.Protocol)}
	case capture.KindFrame:
		c.redactFrame(&r)
	case capture.KindClose:
		delete(c.streams, r.Stream)
	}
	if c.failed {
		return
	}
	if err := c.w.Write(r); err != nil {
		c.failed = true
		c.log.Error("capture stopped; the tap goes on relaying", "err", err)
	}
}

// redactFrame names the frame's type and node and redacts its message.
func (c *Capture) redactFrame(r *capture.Record) {
	st := c.streams[r.Stream]
	if st.protocol == codec.Opaque || st.protocol == "" {
		return
	}
	b := r.Message
	delta := st.protocol == codec.Delta
	request := r.Direction == "request"
	// Read before redaction, which may drop an unreadable message.
	if r.TypeURL = codec.TypeURLOf(b, delta, !request); r.TypeURL == "" {
		r.TypeURL = codec.DefaultTypeOf(st.method) // a per-type service may leave it out
	}
	if request && st.node == "" {
		if req, err := codec.DecodeRequest(b, delta); err == nil && req.Node != nil {
			st.node = req.Node.ID
			c.streams[r.Stream] = st
		}
	}
	r.Node = st.node
	var red []byte
	var redacted bool
	var err error
	if request {
		red, redacted, err = redact.Request(b, delta)
	} else {
		red, redacted, err = redact.Response(b, delta)
	}
	if err != nil {
		// A message that cannot be opened cannot be shown safely.
		r.Message, r.Redacted = nil, true
		return
	}
	r.Message, r.Redacted = red, redacted
}
