package export

import (
	"log/slog"
	"sync"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/tap"
)

// Capture records every relayed frame to a capture file (docs/capture.md),
// after the shared redaction step: no private key or bearer token reaches
// the file. It writes from the observation goroutines, so a slow disk costs
// observed frames (reported as gaps), never the relay's speed.
type Capture struct {
	w   *capture.Writer
	log *slog.Logger

	mu     sync.Mutex
	nodes  map[uint64]string
	failed bool
}

var _ tap.Observer = (*Capture)(nil)

// NewCapture records to w.
func NewCapture(w *capture.Writer, log *slog.Logger) *Capture {
	return &Capture{w: w, log: log, nodes: map[uint64]string{}}
}

// OnStreamOpen records the stream, its headers redacted.
func (c *Capture) OnStreamOpen(s tap.StreamInfo) {
	r := capture.Record{Time: s.OpenedAt, Kind: capture.KindOpen, Stream: s.ID, Conn: s.ConnID, Method: s.Method,
		Protocol: string(s.Protocol), Headers: redact.Headers(s.Header)}
	if s.Peer != nil {
		r.Peer = s.Peer.String()
	}
	c.write(r)
}

// OnFrame records one frame, redacted.
func (c *Capture) OnFrame(s tap.StreamInfo, f tap.Frame) {
	if f.Skipped > 0 {
		c.write(capture.Record{Time: f.Time, Kind: capture.KindGap, Stream: s.ID, Skipped: f.Skipped})
	}
	b := f.Data.Materialize()
	r := capture.Record{Time: f.Time, Kind: capture.KindFrame, Stream: s.ID, Direction: f.Direction.String(), Size: f.Size}
	delta := s.Protocol == codec.Delta
	if s.Protocol != codec.Opaque {
		// Read before redaction, which may drop an unreadable message.
		if r.TypeURL = codec.TypeURLOf(b, delta, f.Direction == tap.Response); r.TypeURL == "" {
			r.TypeURL = codec.DefaultTypeOf(s.Method) // a per-type service may leave it out
		}
	}
	switch {
	case s.Protocol == codec.Opaque:
	case f.Direction == tap.Request:
		c.mu.Lock()
		node, known := c.nodes[s.ID]
		c.mu.Unlock()
		if !known {
			if req, err := codec.DecodeRequest(b, delta); err == nil && req.Node != nil {
				node = req.Node.ID
				c.mu.Lock()
				c.nodes[s.ID] = node
				c.mu.Unlock()
			}
		}
		r.Node = node
		red, redacted, err := redact.Request(b, delta)
		if err != nil {
			b, r.Redacted = nil, true
		} else {
			b, r.Redacted = red, redacted
		}
	default:
		c.mu.Lock()
		r.Node = c.nodes[s.ID]
		c.mu.Unlock()
		red, redacted, err := redact.Response(b, delta)
		if err != nil {
			// A response that cannot be opened cannot be shown safely.
			b, r.Redacted = nil, true
		} else {
			b, r.Redacted = red, redacted
		}
	}
	r.Message = b
	c.write(r)
}

// OnStreamClose records the end of the stream.
func (c *Capture) OnStreamClose(s tap.StreamInfo, e tap.StreamEnd) {
	if e.Skipped > 0 {
		c.write(capture.Record{Time: e.Time, Kind: capture.KindGap, Stream: s.ID, Skipped: e.Skipped})
	}
	c.write(capture.Record{Time: e.Time, Kind: capture.KindClose, Stream: s.ID, Code: e.Code.String(), StatusMessage: e.Message})
	c.mu.Lock()
	delete(c.nodes, s.ID)
	c.mu.Unlock()
}

// OnUpstreamConnect is not recorded.
func (c *Capture) OnUpstreamConnect(codec.UpstreamConnect) {}

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
