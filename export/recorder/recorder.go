// Package recorder is the capture output: every relayed frame, redacted, to a capture file, and the file served for download.
package recorder

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/outq"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/redact"
)

// Recorder records every relayed frame to a capture file (docs/capture.md),
// after the shared redaction step: no private key or bearer token reaches
// the file. It is handed records as the relay saw them — headers and
// messages unredacted — and queues them; a goroutine of its own redacts and
// writes them, so neither redaction nor a slow disk or pipe ever holds up
// the relay or the tracker.
//
// A frame's message is never copied: the Recorder holds a reference to the
// buffers gRPC received it in (mem.BufferSlice) from the moment it is
// queued until it is written, straight from those buffers, secrets cut
// around, and then lets them go. The queue holds at most maxQueueBytes of
// referenced messages; beyond them it holds one frame larger than that
// bound, so a push bigger than the queue (a 40 MB CDS push, the queue 16
// MiB) is captured rather than lost, one at a time. Frames that do not fit
// are dropped, counted (adstap_output_dropped_total{output="capture"}) and
// marked in the file by a gap record.
type Recorder struct {
	w   *capture.Writer
	log *slog.Logger
	q   *outq.Queue[captured]

	// gaps counts, per stream, the frames dropped since its last queued
	// record: the next one is preceded by a gap record. Each stream's count
	// is its own atomic, made at its open: a frame's way through takes no
	// lock another stream takes. large is the size of the frame held beyond
	// the queue's bound, 0 when none is.
	gaps  sync.Map // stream ID → *atomic.Int64
	large atomic.Int64

	// Used by the queue's goroutine only.
	streams map[uint64]capturedStream
	failed  bool
	scan    redact.Scanner
	segs    [][]byte // the buffers of the frame being written
	pieces  [][]byte // what is written of them, secrets cut around
}

// captured is one record waiting in the queue.
type captured struct {
	rec capture.Record
	// data is a frame's message, held by reference; nil for other records
	// and for a frame whose message is rec.Message.
	data mem.BufferSlice
	// large: the frame is the one held beyond the queue's bound.
	large bool
}

// capturedStream is what a frame's record needs from its stream's open.
type capturedStream struct {
	method   string
	protocol codec.Protocol
	node     string
}

var _ export.Output = (*Recorder)(nil)

// recordOverhead is what a record costs besides its message, for the
// queue's bound.
const recordOverhead = 256

// Config shapes the capture.
type Config struct {
	// OutputConfig.QueueBytes bounds the records waiting, but for one frame
	// larger than that.
	export.OutputConfig
	// Writer is the capture file, which Close closes.
	Writer *capture.Writer
}

// New records to cfg.Writer. Close it to write out what waits.
func New(cfg Config) *Recorder {
	log := shared.Logger(cfg.Logger)
	c := &Recorder{w: cfg.Writer, log: log, streams: map[uint64]capturedStream{}}
	c.q = outq.New(export.CaptureOutput, cfg.QueueBytes, c.write, outq.WarnLost(log, export.CaptureOutput, "records"), c.release)
	return c
}

// Record queues r, a KindOpen, KindGap or KindClose record, unredacted, or
// a KindFrame record whose Message is the whole message as it crossed the
// tap, which Record then owns. It never waits: a frame that does not fit
// is dropped.
func (c *Recorder) Record(r capture.Record) {
	if r.Kind != capture.KindFrame {
		// Small, and the file makes no sense without them.
		c.put(captured{rec: r}, recordOverhead, true)
		return
	}
	c.put(captured{rec: r}, len(r.Message)+recordOverhead, false)
}

// Frame queues a KindFrame record whose message is data, the buffers the
// relay received it in. Frame takes over one reference to them — the
// caller takes it (data.Ref) — and lets it go once the frame is written or
// dropped. It never waits.
func (c *Recorder) Frame(r capture.Record, data mem.BufferSlice) {
	c.put(captured{rec: r, data: data}, data.Len()+recordOverhead, false)
}

func (c *Recorder) put(it captured, size int, must bool) {
	frame, stream := it.rec.Kind == capture.KindFrame, it.rec.Stream
	gaps := c.gapsOf(stream, it.rec.Kind == capture.KindOpen)
	if it.rec.Kind == capture.KindClose {
		defer c.gaps.Delete(stream)
	}
	// Taken whole: the stream's other direction may drop frames meanwhile,
	// and each dropped frame is told by exactly one gap record.
	if n := gaps.Swap(0); n > 0 {
		if !c.q.Put(captured{rec: capture.Record{Time: it.rec.Time, Kind: capture.KindGap, Stream: stream, Skipped: int(n)}}, recordOverhead, must) {
			if frame {
				n++
				it.data.Free()
			}
			gaps.Add(n)
			return
		}
	}
	var queued bool
	switch {
	case frame && int64(size) > c.q.MaxBytes():
		// Larger than the whole queue: held beyond it, alone.
		if c.large.CompareAndSwap(0, int64(size)) {
			it.large = true
			if queued = c.q.Put(it, recordOverhead, true); !queued {
				c.large.Store(0)
			}
		}
	default:
		queued = c.q.Put(it, size, must)
	}
	if !queued && frame {
		gaps.Add(1)
		it.data.Free()
	}
}

// gapsOf is the stream's count of dropped frames, made at its open. The
// map is written once a stream, at its open and close, and read without a
// lock for every frame.
func (c *Recorder) gapsOf(stream uint64, open bool) *atomic.Int64 {
	if !open {
		if g, ok := c.gaps.Load(stream); ok {
			return g.(*atomic.Int64)
		}
	}
	g, _ := c.gaps.LoadOrStore(stream, new(atomic.Int64))
	return g.(*atomic.Int64)
}

// release lets go of what a record held, written or dropped.
func (c *Recorder) release(it captured) {
	if it.data == nil {
		return
	}
	it.data.Free()
	if it.large {
		c.large.Store(0)
	}
}

// Name is the output's name, its queue's.
func (c *Recorder) Name() string { return export.CaptureOutput }

// Dropped counts the records dropped because the queue was full.
func (c *Recorder) Dropped() uint64 { return c.q.Dropped() }

// Close writes out the records that wait, until ctx is done, then closes the
// file. Past ctx the rest is dropped, and the file is closed once the write
// in hand returns, if ever.
func (c *Recorder) Close(ctx context.Context) error {
	if err := c.q.Close(ctx); err != nil {
		go func() {
			<-c.q.Done()
			c.w.Close()
		}()
		return err
	}
	if err := c.w.Close(); err != nil {
		return fmt.Errorf("%s: closing the file: %w", export.CaptureOutput, err)
	}
	return nil
}

// write redacts a record and writes it, on the queue's goroutine.
func (c *Recorder) write(it captured) {
	defer c.release(it)
	r := it.rec
	switch r.Kind {
	case capture.KindOpen:
		r.Headers = redact.Headers(r.Headers)
		c.streams[r.Stream] = capturedStream{method: r.Method, protocol: codec.Protocol(r.Protocol)}
	case capture.KindClose:
		delete(c.streams, r.Stream)
	}
	if c.failed {
		return
	}
	var err error
	if r.Kind == capture.KindFrame {
		err = c.writeFrame(r, it.data)
	} else {
		err = c.w.Write(r)
	}
	if err != nil {
		c.failed = true
		c.log.Error("capture stopped; the tap goes on relaying", "err", err)
	}
}

// writeFrame names the frame's type and node, finds its secrets and writes
// it from its buffers, around them.
func (c *Recorder) writeFrame(r capture.Record, data mem.BufferSlice) error {
	segs := c.segs[:0]
	if data != nil {
		for _, b := range data {
			segs = append(segs, b.ReadOnlyData())
		}
	} else if r.Message != nil {
		segs = append(segs, r.Message)
	}
	r.Message = nil
	pieces := c.pieces[:0]
	defer func() {
		// Kept, the lists would hold on to buffers gRPC wants back.
		clear(segs)
		clear(pieces)
		c.segs, c.pieces = segs[:0], pieces[:0]
	}()
	st := c.streams[r.Stream]
	if st.protocol == codec.Opaque || st.protocol == "" {
		return c.w.WriteFrame(r, segs)
	}
	delta := st.protocol == codec.Delta
	request := r.Direction == codec.DirectionRequest.String()
	if request && st.node == "" {
		if req, err := redact.DecodeRequest(joined(segs, data), delta); err == nil && req.Node != nil {
			st.node = req.Node.ID
			c.streams[r.Stream] = st
		}
	}
	r.Node = st.node
	var red redact.Redaction
	var err error
	if request {
		red, err = c.scan.Request(segs, delta)
	} else {
		red, err = c.scan.Response(segs, delta)
	}
	if r.TypeURL = red.TypeURL; r.TypeURL == "" {
		r.TypeURL = codec.DefaultTypeOf(st.method) // a per-type service may leave it out
	}
	if err != nil {
		// A message that cannot be read cannot be shown safely.
		r.Redacted = true
		return c.w.WriteFrame(r, nil)
	}
	r.Redacted = red.Redacted()
	pieces = red.AppendPieces(pieces, segs)
	return c.w.WriteFrame(r, pieces)
}

// joined is a request's bytes in one piece, for the decoder: requests are
// small, and most arrive in one buffer.
func joined(segs [][]byte, data mem.BufferSlice) []byte {
	switch {
	case len(segs) == 1:
		return segs[0]
	case data != nil:
		return data.Materialize()
	}
	return nil
}
