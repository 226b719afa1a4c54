package tap

import (
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"

	"github.com/adstap/adstap/codec"
)

// Observer is told about every stream and every frame the tap relays, in the
// order the frames crossed the tap. The calls come from the tap's observation
// workers (Config.ObserveWorkers): the calls for one stream keep their order
// and never overlap, but two of them may come from different workers; calls
// for different streams may run at once.
//
// The relay never waits for an observer: frames are queued for it, and when
// the queue is over its bound they are skipped and counted (Frame.Skipped).
// A call that blocks holds its worker, though, and once every worker is held
// no stream is observed until one returns: an observer must not wait on I/O.
//
// OnUpstreamConnect is called each time an upstream connection comes up or
// fails to, from a goroutine of the tap's, never from the dial or the
// handshake, which only queue the report; reports wait while it runs, so it
// should return quickly.
type Observer interface {
	OnStreamOpen(StreamInfo)
	OnFrame(StreamInfo, Frame)
	OnStreamClose(StreamInfo, StreamEnd)
	OnUpstreamConnect(codec.UpstreamConnect)
}

// ObserverFuncs is an Observer built from optional functions; a nil field is a no-op.
type ObserverFuncs struct {
	StreamOpenFunc      func(StreamInfo)
	FrameFunc           func(StreamInfo, Frame)
	StreamCloseFunc     func(StreamInfo, StreamEnd)
	UpstreamConnectFunc func(codec.UpstreamConnect)
}

var _ Observer = ObserverFuncs{}

// OnStreamOpen calls StreamOpenFunc if set.
func (f ObserverFuncs) OnStreamOpen(s StreamInfo) {
	if f.StreamOpenFunc != nil {
		f.StreamOpenFunc(s)
	}
}

// OnFrame calls FrameFunc if set.
func (f ObserverFuncs) OnFrame(s StreamInfo, fr Frame) {
	if f.FrameFunc != nil {
		f.FrameFunc(s, fr)
	}
}

// OnStreamClose calls StreamCloseFunc if set.
func (f ObserverFuncs) OnStreamClose(s StreamInfo, e StreamEnd) {
	if f.StreamCloseFunc != nil {
		f.StreamCloseFunc(s, e)
	}
}

// OnUpstreamConnect calls UpstreamConnectFunc if set.
func (f ObserverFuncs) OnUpstreamConnect(c codec.UpstreamConnect) {
	if f.UpstreamConnectFunc != nil {
		f.UpstreamConnectFunc(c)
	}
}

// Direction says which way a frame travelled: codec's, which the tracker
// and the outputs share.
type Direction = codec.Direction

const (
	// Request frames travel from the client (Envoy) to the control plane.
	Request = codec.DirectionRequest
	// Response frames travel from the control plane to the client.
	Response = codec.DirectionResponse
)

// StreamInfo describes one relayed stream. It does not change after the stream opens, but
// for Header, which only OnStreamOpen is given.
type StreamInfo struct {
	ID       uint64 // unique within this process, in opening order
	ConnID   uint64 // the downstream connection the stream belongs to
	Method   string // full gRPC method, e.g. /envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources
	Protocol codec.Protocol
	Peer     net.Addr
	OpenedAt time.Time
	// Connect is how the stream's upstream connection came up, for the
	// stream that waited for it to; nil for a stream that found it up.
	Connect *codec.UpstreamConnect
	// Header is the downstream request metadata, in OnStreamOpen only (nil
	// after: a stream waits most of its life, and holds no copy of it
	// meanwhile). It includes credentials such as authorization: an
	// observer that writes it anywhere must redact it.
	Header metadata.MD
}

// Frame is one message as it crossed the tap.
type Frame struct {
	Direction Direction
	Time      time.Time // when the relay received it, before forwarding
	Size      int
	// Data holds the message bytes by reference and is valid only during the
	// OnFrame call; an observer that keeps them must Ref them (and Free later)
	// or copy them.
	Data mem.BufferSlice
	// Skipped counts frames of this stream that were relayed but not shown to
	// the observer, since the previous delivered frame, because its queue was full.
	Skipped int

	// held is what the frame counts against the queues' bound while it
	// waits: Size, or less once folded (fold.go).
	held int
}

// StreamEnd says how a stream ended.
type StreamEnd struct {
	Time    time.Time
	Code    codes.Code // the status the downstream client received
	Message string
	// By names the side that ended the stream: "client", "upstream", "tap".
	By string
	// Skipped counts frames relayed after the last delivered frame but never shown to the observer.
	Skipped int
}

// Observers is an Observer that tells each of obs in turn, on the same
// goroutine, so every one of them sees frames in the order they crossed.
func Observers(obs ...Observer) Observer {
	if len(obs) == 1 {
		return obs[0]
	}
	return observers(obs)
}

type observers []Observer

func (os observers) OnStreamOpen(s StreamInfo) {
	for _, o := range os {
		o.OnStreamOpen(s)
	}
}

func (os observers) OnFrame(s StreamInfo, f Frame) {
	for _, o := range os {
		o.OnFrame(s, f)
	}
}

func (os observers) OnStreamClose(s StreamInfo, e StreamEnd) {
	for _, o := range os {
		o.OnStreamClose(s, e)
	}
}

func (os observers) OnUpstreamConnect(c codec.UpstreamConnect) {
	for _, o := range os {
		o.OnUpstreamConnect(c)
	}
}
