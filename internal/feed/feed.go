// Package feed is the one step from a frame's bytes to the tracker: decode
// the envelope, then track it. The running tap's observer, adstap inspect's
// replay of captures and adstap replay's serving of them all take it, so a
// frame means the same to the tracker wherever it comes from, and a frame
// that does not decode is tracked as such (a track.DecodeError) everywhere.
package feed

import (
	"time"

	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/track"
)

// Frame is one message of a stream, as it crossed.
type Frame struct {
	Stream   uint64
	At       time.Time
	Response bool // from the control plane; else a request from the client
	Delta    bool
	// Data are the message's bytes. A response's are read where they lie,
	// in the pieces they came in, and the tracker may keep a reference to
	// them (track.Tracker.ResponseFrame); a request's are read at once.
	Data mem.BufferSlice
	// Size is the message's size on the wire.
	Size int
	// Events, when not nil, is a buffer the tracker's events are appended
	// to (from its length), which the caller reuses once it has handed them
	// on.
	Events []track.Event
}

// Decoded is what a frame decoded into: its request, or the response
// decoded into the caller's; Err when it did not decode.
type Decoded struct {
	Request  *codec.Request
	Response *codec.Response
	Err      error
}

// Track decodes f and tracks it with tr, returning the tracker's events
// and what f decoded into. A request is decoded through redact, so that the
// keys a NACK's message quotes never reach the tracker or an output. A
// response is decoded into resp, which the caller reuses from frame to
// frame so that a steady stream of pushes does not allocate per resource;
// it holds views into f.Data until it decodes the next. A frame that does
// not decode gives the tracker's DecodeError event, and its error in
// Decoded.Err: it was relayed all the same.
func Track(tr *track.Tracker, resp *codec.Response, f Frame) ([]track.Event, Decoded) {
	if !f.Response {
		b, release := contiguous(f.Data)
		defer release()
		req, err := redact.DecodeRequest(b, f.Delta)
		if err != nil {
			return append(f.Events, tr.DecodeFailed(f.Stream, f.At, codec.DirectionRequest, err)...), Decoded{Err: err}
		}
		return tr.AppendRequest(f.Events, f.Stream, f.At, req, f.Size), Decoded{Request: req}
	}
	// Read in the pieces gRPC received it in: a copy of a 10 MB push into
	// one buffer cost as much as decoding it.
	if err := resp.DecodeBuffers(f.Data, f.Delta); err != nil {
		return append(f.Events, tr.DecodeFailed(f.Stream, f.At, codec.DirectionResponse, err)...), Decoded{Err: err}
	}
	return tr.AppendResponseFrame(f.Events, f.Stream, f.At, resp, f.Size, f.Data), Decoded{Response: resp}
}

// contiguous returns a request's bytes in one slice: the buffer itself when
// the message is in one piece, else a pooled copy (requests are small).
func contiguous(data mem.BufferSlice) ([]byte, func()) {
	if len(data) == 1 {
		return data[0].ReadOnlyData(), func() {}
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	return buf.ReadOnlyData(), buf.Free
}
