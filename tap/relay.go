package tap

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/adstap/adstap/codec"
)

// bidi is how every method is opened upstream: the tap does not know, and
// need not know, whether a method streams; a unary call is a stream that
// carries one message each way.
var bidi = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// relay is one downstream stream and the upstream stream it is tied to.
//
// Two goroutines move frames: the handler's goroutine reads the upstream and
// writes the downstream; the request pump reads the downstream and writes the
// upstream. Neither ever touches the other's direction, and each waits only on
// the peer it writes to, so gRPC's flow control carries backpressure end to
// end and no queue of the tap's own can grow.
type relay struct {
	log *slog.Logger
	// upstream and maxMessageSize are what the statuses the tap gives
	// name (upstreamFailure).
	upstream       Address
	maxMessageSize int
	info           StreamInfo
	down           grpc.ServerStream
	up             grpc.ClientStream
	call           *callState
	// ctx is the upstream stream's and cancel ends it; release undoes the
	// stream's count in its connection and in the server.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	release func()
	obs     *observation // nil without an observer
	count   *relayCounters
}

// pumpRequests moves frames from the client to the control plane.
//
// Its goroutine spends an idle stream's life parked in RecvMsg with this
// frame beneath it, and the runtime halves a stack at a collection only
// while less than a quarter of it is in use. So what the loop does with a
// frame or an error is in functions of its own, called once RecvMsg has
// returned: parked, the pump uses under 2 KB, and a stack that a frame's
// relaying grew to 8 KB comes back to 4 KB, as a plain relay's does
// (docs/performance.md, W3).
func (r *relay) pumpRequests() {
	for {
		f := &codec.RawMessage{}
		if err := r.down.RecvMsg(f); err != nil {
			r.requestsEnded(err)
			return
		}
		if !r.forwardRequest(f) {
			return
		}
	}
}

// forwardRequest hands a client's frame to the observer and to the control
// plane; it reports false once the stream has ended.
//
//go:noinline
func (r *relay) forwardRequest(f *codec.RawMessage) bool {
	if !r.observe(Request, f) {
		// The stream ended while this frame was on its way.
		f.Data.Free()
		return false
	}
	if err := r.up.SendMsg(f); err != nil {
		// The upstream stream has ended; pumpResponses reports why.
		f.Data.Free()
		return false
	}
	return true
}

// requestsEnded handles the end of the client's side of the stream.
//
//go:noinline
func (r *relay) requestsEnded(err error) {
	if err == io.EOF {
		// The client half-closed; the control plane may still answer.
		r.up.CloseSend()
		return
	}
	if status.Code(err) == codes.ResourceExhausted {
		// gRPC has already told the client; the log says which limit.
		r.log.Warn("request message over the receive limit; stream ended",
			"stream", r.info.ID, "method", r.info.Method, "peer", r.info.Peer,
			"max_message_size", r.maxMessageSize, "err", err)
		r.cancel(status.Errorf(codes.ResourceExhausted,
			"adstap: a request message exceeds the tap's receive limit (--max-message-size=%d bytes): %s",
			r.maxMessageSize, status.Convert(err).Message()))
		return
	}
	// Anything else means the client's stream is done, which has already
	// cancelled the upstream stream.
}

// pumpResponses moves frames from the control plane to the client and returns
// the status the client should receive.
func (r *relay) pumpResponses() error {
	ctx := r.ctx
	// Headers come first and on their own: a control plane may send them and
	// then fail before any message, and the client must still see them.
	// Header's own answer says whether headers came: nil for a stream that
	// ended without any (trailers-only), which must stay trailers-only. The
	// stats hook's InHeader is no signal here: gRPC runs it after it has
	// released Header, so it may not have fired yet.
	if md, err := r.up.Header(); err == nil && md != nil {
		if err := r.down.SendHeader(md); err != nil {
			return r.finish(ctx, err, "client")
		}
	}
	for {
		f := &codec.RawMessage{}
		err := r.up.RecvMsg(f)
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			r.down.SetTrailer(r.up.Trailer())
			return r.finish(ctx, err, "upstream")
		}
		r.observe(Response, f)
		// A frame the observer waits for may be folded into the same bytes
		// sent to other streams (observation.fold), once forwarded: its
		// buffers are kept for that by a reference of the relay's own,
		// since SendMsg gives its to the transport.
		data := f.Data
		fold := r.obs != nil && r.obs.foldable(data)
		if fold {
			data.Ref()
		}
		if err := r.down.SendMsg(f); err != nil {
			f.Data.Free()
			if fold {
				data.Free()
			}
			return r.finish(ctx, err, "client")
		}
		if fold {
			r.obs.fold(data)
			data.Free()
		}
	}
}

// observe hands a frame to the observer and counts it, before it is
// forwarded; it reports false for a frame that arrived after the stream
// ended, which is neither forwarded, shown nor counted.
func (r *relay) observe(d Direction, f *codec.RawMessage) bool {
	size := f.Data.Len()
	if r.obs != nil && !r.obs.frame(Frame{Direction: d, Time: time.Now(), Size: size, Data: f.Data}) {
		return false
	}
	r.count.frame(d, size)
	return true
}

// finish decides the status the client receives and reports the end.
func (r *relay) finish(ctx context.Context, err error, by string) error {
	if err != nil {
		by, err = upstreamFailure(ctx, r.call, err, r.upstream, r.maxMessageSize)
	}
	if r.obs != nil {
		st := status.Convert(err)
		r.obs.close(StreamEnd{Time: time.Now(), Code: st.Code(), Message: st.Message(), By: by})
	}
	return err
}

// upstreamFailure turns an error from the upstream stream into the status the
// client receives, and names the side that ended the stream. A status the
// control plane sent is passed on exactly; one the tap caused (a drain, an
// oversized message) says so; a failure of the upstream connection itself is
// Unavailable and names the upstream, so the client retries, as it would had
// it lost the control plane directly.
func upstreamFailure(ctx context.Context, call *callState, err error, upstream Address, maxMessageSize int) (by string, ended error) {
	if cause := context.Cause(ctx); cause != nil {
		if _, ok := status.FromError(cause); ok {
			return "tap", cause
		}
		// The client went away or its deadline passed.
		return "client", status.FromContextError(ctx.Err()).Err()
	}
	if call.gotTrailer.Load() {
		return "upstream", err
	}
	st := status.Convert(err)
	if st.Code() == codes.ResourceExhausted {
		return "tap", status.Errorf(codes.ResourceExhausted,
			"adstap: a response message from upstream %s exceeds the tap's receive limit (--max-message-size=%d bytes): %s",
			upstream, maxMessageSize, st.Message())
	}
	return "upstream", status.Errorf(codes.Unavailable, "adstap: upstream %s: %s", upstream, st.Message())
}

// forwardedHeader is the request metadata the control plane receives: all of
// the client's, credentials and custom headers included, less the transport
// headers gRPC sets itself for the upstream leg.
func forwardedHeader(in metadata.MD) metadata.MD {
	out := make(metadata.MD, len(in))
	for k, v := range in {
		if strings.HasPrefix(k, ":") {
			continue
		}
		switch k {
		case "content-type", "user-agent", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding", "grpc-message-type":
			continue
		}
		out[k] = v
	}
	return out
}

// freshConnect is the connect a stream waited for: the one that happened
// while its upstream stream was being opened, if any.
func freshConnect(before, after *codec.UpstreamConnect) *codec.UpstreamConnect {
	if after == before {
		return nil
	}
	return after
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// callState records what the upstream sent on one stream, as seen by gRPC's
// stats hooks: a status that came in trailers is the control plane's own and
// goes back untouched; a failure without one is the tap's to explain.
type callState struct {
	gotTrailer atomic.Bool
}

type callStateKey struct{}

func withCallState(ctx context.Context, c *callState) context.Context {
	return context.WithValue(ctx, callStateKey{}, c)
}

type upstreamStats struct{}

func (upstreamStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (upstreamStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (upstreamStats) HandleConn(context.Context, stats.ConnStats) {}

func (upstreamStats) HandleRPC(ctx context.Context, st stats.RPCStats) {
	c, _ := ctx.Value(callStateKey{}).(*callState)
	if c == nil {
		return
	}
	if _, ok := st.(*stats.InTrailer); ok {
		c.gotTrailer.Store(true)
	}
}
