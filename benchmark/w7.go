package benchmark

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// w7 is a sidecar's footprint: one proxy's stream synced with one large
// CDS push, then idle, through a middle started afresh for each push size.
// Its paths are the pass-through relay (the floor) and adstap itself, the
// binary, started with the injection template's flags (capture on, to a
// file), with and without the capture. The resident memory is read right
// after the upstream received the ACK (synced) and after the stream stayed
// idle for a while (idle).
type w7 struct {
	pushes []msg
	nonces []string
	acks   [][]byte
	idle   time.Duration
}

// Footprint is the middle's memory around one push of W7.
type Footprint struct {
	PushBytes int
	// Started is the middle as it started, idle, before its stream: for
	// adstap, the binary as it runs in every pod before its proxy connects.
	Started      Usage
	Synced, Idle Usage
	Peak         int64 // the highest RSS from the middle's start to idle
}

// NewW7 builds W7's pushes, one per size of Sizes.W7Clusters.
func NewW7(s Sizes) *w7 {
	w := &w7{idle: s.W7Idle}
	for i, n := range s.W7Clusters {
		var clusters []proto.Message
		for _, c := range xdsconfig.Clusters(n, s.W1PadTo) {
			clusters = append(clusters, c)
		}
		v, nonce := pushVersion("w7", i), pushNonce("w7", i)
		w.pushes = append(w.pushes, sotwPush(v, nonce, codec.TypeCluster, sotwBody(clusters)))
		w.nonces = append(w.nonces, nonce)
		w.acks = append(w.acks, sotwACK(v, nonce, codec.TypeCluster, nil))
	}
	return w
}

func (*w7) ID() string { return "W7" }

// paths are the relay and adstap with the template's flags, with and
// without its capture.
func (*w7) Paths() []Path { return []Path{Relay, Sidecar, SidecarNoCapture} }

func (w *w7) Describe() string {
	var sizes string
	for i, p := range w.pushes {
		if i > 0 {
			sizes += ", then "
		}
		sizes += sizeMB(p.Len)
	}
	return fmt.Sprintf("one stream, a middle started afresh for each SotW CDS push (%s), ACKed, then idle %v", sizes, w.idle)
}

func (w *w7) Run(ctx context.Context, start StartMiddle) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	t0 := time.Now()
	for i := range w.pushes {
		f, window, err := w.one(ctx, start, i)
		if err != nil {
			return res, fmt.Errorf("push of %s: %w", sizeMB(w.pushes[i].Len), err)
		}
		res.Footprints = append(res.Footprints, f)
		res.Middle = window // the last, largest push's
		res.Pushes++
		res.ACKs++
		res.Bytes += int64(w.pushes[i].Len)
	}
	res.Wall, res.Streams = time.Since(t0), 1
	return res, nil
}

// one runs push i through a fresh middle.
func (w *w7) one(ctx context.Context, start StartMiddle, i int) (f Footprint, window Window, err error) {
	errs := newFirstError()
	var acked atomic.Bool
	ackSeen, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	m, stop, err := startPath(start, func(method string, s grpc.ServerStream) error {
		if method != methodSotW {
			return wrongMethod(errs, method, methodSotW)
		}
		if err := checkW1Initial(s); err != nil {
			return upstreamFailed(errs, err)
		}
		if err := pushAndExpectACK(s, w.pushes[i], w.nonces[i]); err != nil {
			return upstreamFailed(errs, err)
		}
		acked.Store(true)
		close(ackSeen)
		return waitGate(s, release)
	})
	if err != nil {
		return f, window, err
	}
	defer func() { err = firstOf(err, stop()) }()
	if err := m.Begin(); err != nil {
		return f, window, err
	}
	cc, err := dialRaw(m.Addr())
	if err != nil {
		return f, window, err
	}
	defer cc.Close()
	sctx, endStream := context.WithCancel(ctx)
	defer endStream()
	s, err := xdstest.OpenRaw(sctx, cc, methodSotW)
	if err != nil {
		return f, window, err
	}
	initial := mustMarshal(&discovery.DiscoveryRequest{Node: node(0), TypeUrl: codec.TypeCluster})
	if err := sendBytes(s, initial); err != nil {
		return f, window, err
	}
	if err := acceptPush(s, w.pushes[i], w.acks[i], "the push"); err != nil {
		return f, window, firstOf(errs.get(), err)
	}
	if err := waitFor(ackSeen, time.Minute, "the upstream to receive the ACK"); err != nil {
		return f, window, firstOf(errs.get(), err)
	}
	f.PushBytes = w.pushes[i].Len
	if f.Synced, err = m.Sample(); err != nil {
		return f, window, err
	}
	select {
	case <-time.After(w.idle):
	case <-ctx.Done():
		return f, window, ctx.Err()
	}
	if f.Idle, err = m.Sample(); err != nil {
		return f, window, err
	}
	if window, err = m.End(); err != nil {
		return f, window, err
	}
	f.Started, f.Peak = window.Start, window.PeakRSS
	return f, window, errs.get()
}
