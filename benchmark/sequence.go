package benchmark

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// pushSequence is a workload of one stream (W1, W4): the client sends
// initial, receives pushes[0] and ACKs it with acks[0] before the measured
// window, then receives and ACKs every other push while it is measured. The
// upstream checks the initial request with checkInitial, and sends each push
// once the previous one is ACKed.
type pushSequence struct {
	method       string
	initial      []byte
	pushes       []msg
	nonces       []string
	acks         [][]byte
	warmUp       string // what pushes[0] is called in errors
	checkInitial func(msgStream) error
	expectACK    func(s msgStream, nonce string) error
}

func (q *pushSequence) run(ctx context.Context, start StartMiddle) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	errs := newFirstError()
	var acks atomic.Int64
	gate := make(chan struct{})
	m, stop, err := startPath(start, func(method string, s grpc.ServerStream) error {
		if method != q.method {
			return wrongMethod(errs, method, q.method)
		}
		if err := q.checkInitial(s); err != nil {
			return upstreamFailed(errs, err)
		}
		for i, p := range q.pushes {
			if i == 1 {
				if err := waitGate(s, gate); err != nil {
					return err
				}
			}
			if err := sendMsg(s, p); err != nil {
				return upstreamFailed(errs, err)
			}
			if err := q.expectACK(s, q.nonces[i]); err != nil {
				return upstreamFailed(errs, err)
			}
			acks.Add(1)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	defer func() { err = firstOf(err, stop()) }()
	cc, err := dialRaw(m.Addr())
	if err != nil {
		return res, err
	}
	defer cc.Close()
	s, err := xdstest.OpenRaw(ctx, cc, q.method)
	if err != nil {
		return res, err
	}
	if err := sendBytes(s, q.initial); err != nil {
		return res, err
	}
	if err := expectPush(s, q.pushes[0], q.warmUp); err != nil {
		return res, firstOf(errs.get(), err)
	}
	if err := sendBytes(s, q.acks[0]); err != nil {
		return res, err
	}
	if err := m.Begin(); err != nil {
		return res, err
	}
	t0 := time.Now()
	close(gate)
	for i := 1; i < len(q.pushes); i++ {
		if err := expectPush(s, q.pushes[i], fmt.Sprintf("push %d", i)); err != nil {
			return res, firstOf(errs.get(), err)
		}
		if err := sendBytes(s, q.acks[i]); err != nil {
			return res, err
		}
		res.Bytes += int64(q.pushes[i].Len)
	}
	res.Wall = time.Since(t0)
	if res.Middle, err = m.End(); err != nil {
		return res, err
	}
	if err := expectEnd(s); err != nil {
		return res, firstOf(errs.get(), err)
	}
	if err := errs.get(); err != nil {
		return res, err
	}
	res.Pushes, res.ACKs, res.Streams = len(q.pushes)-1, int(acks.Load()), 1
	if res.ACKs != len(q.pushes) {
		return res, fmt.Errorf("upstream counted %d ACKs, want %d", res.ACKs, len(q.pushes))
	}
	return res, nil
}

// answer is a SotW or Delta request, as far as an ACK is concerned.
type answer interface {
	proto.Message
	GetResponseNonce() string
	GetErrorDetail() *rpcstatus.Status
}

// expectAnswer receives a request into req and checks that it accepts nonce.
func expectAnswer(s msgStream, req answer, nonce string) error {
	if err := recvRequest(s, req); err != nil {
		return err
	}
	if req.GetErrorDetail() != nil {
		return fmt.Errorf("NACK of %s: %s", req.GetResponseNonce(), req.GetErrorDetail().GetMessage())
	}
	if req.GetResponseNonce() != nonce {
		return fmt.Errorf("request answers nonce %q, want an ACK of %q", req.GetResponseNonce(), nonce)
	}
	return nil
}

// firstOf returns the first of errs that is not a cancellation (canceled),
// else the first error; nil when there is none.
func firstOf(errs ...error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !canceled(err) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// canceled reports whether err is a stream's or a run's cancellation. A run
// stops at its first failure by cancelling its streams, and whoever then
// sees a stream cancelled says so too, sometimes before the failure itself
// is recorded: firstOf passes over these for the failure that caused them.
func canceled(err error) bool {
	return errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled
}
