package export

import (
	"log/slog"
	"sync"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
)

// Capture records every relayed frame to a capture file (docs/capture.md),
// after the shared redaction step: no private key or bearer token reaches
// the file. It is handed records as the relay saw them — headers and
// messages unredacted — and redacts them itself, so redaction runs where the
// capture's writing runs, never where frames are relayed or tracked.
type Capture struct {
	w   *capture.Writer
	log *slog.Logger

	mu      sync.Mutex
	streams map[uint64]capturedStream
	failed  bool
}

// capturedStream is what a frame's record needs from its stream's open.
type capturedStream struct {
	method   string
	protocol codec.Protocol
	node     string
}

// NewCapture records to w.
func NewCapture(w *capture.Writer, log *slog.Logger) *Capture {
	return &Capture{w: w, log: log, streams: map[uint64]capturedStream{}}
}

// Record redacts r and writes it. r is a KindOpen, KindFrame, KindGap or
// KindClose record; a frame's Message is the whole message as it crossed the
// tap, and Record owns it.
func (c *Capture) Record(r capture.Record) {
	switch r.Kind {
	case capture.KindOpen:
		r.Headers = redact.Headers(r.Headers)
		c.mu.Lock()
		c.streams[r.Stream] = capturedStream{method: r.Method, protocol: codec.Protocol(r.Protocol)}
		c.mu.Unlock()
	case capture.KindFrame:
		c.redactFrame(&r)
	case capture.KindClose:
		c.mu.Lock()
		delete(c.streams, r.Stream)
		c.mu.Unlock()
	}
	c.write(r)
}

// redactFrame names the frame's type and node and redacts its message.
func (c *Capture) redactFrame(r *capture.Record) {
	c.mu.Lock()
	st := c.streams[r.Stream]
	c.mu.Unlock()
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
			c.mu.Lock()
			if _, open := c.streams[r.Stream]; open {
				c.streams[r.Stream] = st
			}
			c.mu.Unlock()
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

func (c *Capture) write(r capture.Record) {
	if err := c.w.Write(r); err != nil {
		c.mu.Lock()
		first := !c.failed
		c.failed = true
		c.mu.Unlock()
		if first {
			c.log.Error("capture stopped; the tap goes on relaying", "err", err)
		}
	}
}
