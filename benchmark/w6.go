package benchmark

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/codec"
)

// w6 is a fan-out: many synced proxies, one connection each, and a config
// change that makes the control plane push a new CDS to all of them at the
// same instant, as istiod's full push does. Every stream is first synced on
// one version; then every upstream handler, released at once, sends the next
// version (2 % of its clusters changed) and waits for its ACK. What counts is
// the time from the first send to the last ACK (how long the mesh takes to
// converge), each stream's time from its send to its ACK, and the middle's
// CPU during the push.
type w6 struct {
	streams int
	settle  time.Duration
	initial [][]byte       // per stream
	index   map[string]int // stream by node id
	// Stream i's sync and push, their nonces and ACKs: the same resources
	// for every stream, in one shared body, and a nonce of each stream's
	// own, as istiod sends (a full push is the same bytes to every proxy
	// but for the nonce).
	syncs, pushes    []msg
	syncNonces, next []string
	ackSync, ackPush [][]byte
}

// newW6 builds W6's two versions of the clusters.
func newW6(s Sizes) *w6 {
	a, b := clusterVersions(s.W6Clusters, 1000)
	w := &w6{streams: s.W6Streams, settle: s.W6Settle, index: map[string]int{}}
	syncBody, pushBody := sotwBody(a), sotwBody(b)
	for i := range s.W6Streams {
		syncNonce, next := streamNonce("w6", 1, i), streamNonce("w6", 2, i)
		w.syncNonces, w.next = append(w.syncNonces, syncNonce), append(w.next, next)
		w.syncs = append(w.syncs, sotwPush(pushVersion("w6", 1), syncNonce, codec.TypeCluster, syncBody))
		w.pushes = append(w.pushes, sotwPush(pushVersion("w6", 2), next, codec.TypeCluster, pushBody))
		w.ackSync = append(w.ackSync, sotwACK(pushVersion("w6", 1), syncNonce, codec.TypeCluster, nil))
		w.ackPush = append(w.ackPush, sotwACK(pushVersion("w6", 2), next, codec.TypeCluster, nil))
		n := node(i)
		w.index[n.Id] = i
		w.initial = append(w.initial, mustMarshal(&discovery.DiscoveryRequest{Node: n, TypeUrl: codec.TypeCluster}))
	}
	return w
}

func (*w6) ID() string { return "W6" }

func (w *w6) Describe() string {
	return fmt.Sprintf("%d streams, one connection each, synced on a CDS of %s, then all pushed the next version (%s) at the same instant, ACKed",
		w.streams, sizeKB(w.syncs[0].Len), sizeKB(w.pushes[0].Len))
}

// pushTimes are one stream's push: when the upstream sent it, when the ACK came back.
type pushTimes struct{ sent, acked time.Time }

func (w *w6) Run(ctx context.Context, start StartMiddle) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	var (
		errs     = newFirstError()
		acks     atomic.Int64
		synced   atomic.Int64
		pushed   atomic.Int64
		allSync  = make(chan struct{})
		allACKed = make(chan struct{})
		gate     = make(chan struct{})
		opened   = make([]atomic.Bool, w.streams)
		times    = make([]pushTimes, w.streams)
	)
	m, stop, err := startPath(start, func(method string, s grpc.ServerStream) error {
		if method != methodSotW {
			return wrongMethod(errs, method, methodSotW)
		}
		var req discovery.DiscoveryRequest
		if err := recvRequest(s, &req); err != nil {
			return upstreamFailed(errs, err)
		}
		i, ok := w.index[req.Node.GetId()]
		if !ok || req.TypeUrl != codec.TypeCluster || opened[i].Swap(true) {
			return upstreamFailed(errs, fmt.Errorf("unexpected first request for %q from %q", req.TypeUrl, req.Node.GetId()))
		}
		if err := pushAndExpectACK(s, w.syncs[i], w.syncNonces[i]); err != nil {
			return upstreamFailed(errs, err)
		}
		acks.Add(1)
		if synced.Add(1) == int64(w.streams) {
			close(allSync)
		}
		if err := waitGate(s, gate); err != nil {
			return err
		}
		sent := time.Now()
		if err := pushAndExpectACK(s, w.pushes[i], w.next[i]); err != nil {
			return upstreamFailed(errs, err)
		}
		times[i] = pushTimes{sent, time.Now()}
		acks.Add(1)
		if pushed.Add(1) == int64(w.streams) {
			close(allACKed)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	defer func() { err = firstOf(err, stop()) }()

	clients := startFleet(ctx, m.Addr(), w.streams, 1, func(cc *grpc.ClientConn, i int, ready func()) error {
		return w.client(ctx, cc, i, ready)
	})
	defer func() {
		cancel()
		<-clients.done
		clients.closeConns()
	}()
	if err := clients.waitFor(ctx, errs, allSync, "every stream synced"); err != nil {
		return res, err
	}
	// Let the middle's queues and its observation of the sync settle, so
	// the push is what the window measures.
	time.Sleep(w.settle)
	// A mesh's full push comes long after its proxies synced, by when the
	// runtime's periodic collection (every two minutes at the latest) has
	// taken the sync's garbage and its scavenger has returned the freed
	// pages. Collecting here starts every path's window from there, rather
	// than from wherever the sync left its collector: one collection more
	// or less in the window moved a middle's CPU by 10-15 %.
	if _, err := m.SampleAfterGC(); err != nil {
		return res, err
	}
	if err := m.Begin(); err != nil {
		return res, err
	}
	close(gate)
	if err := clients.waitFor(ctx, errs, allACKed, "every push ACKed"); err != nil {
		return res, err
	}
	// The middle's window goes on a moment after the last ACK, so that its
	// CPU includes observing what it relayed (observation may finish after
	// the relay).
	time.Sleep(w.settle)
	if res.Middle, err = m.End(); err != nil {
		return res, err
	}
	if err := clients.end(ctx, errs); err != nil {
		return res, err
	}
	res.ACKs, res.Streams, res.Pushes = int(acks.Load()), w.streams, w.streams
	if res.ACKs != 2*w.streams {
		return res, fmt.Errorf("upstream counted %d ACKs, want %d", res.ACKs, 2*w.streams)
	}
	first, last := times[0].sent, times[0].acked
	for _, t := range times {
		if t.sent.Before(first) {
			first = t.sent
		}
		if t.acked.After(last) {
			last = t.acked
		}
		res.Latencies = append(res.Latencies, t.acked.Sub(t.sent))
	}
	res.Wall = last.Sub(first)
	res.Bytes = int64(w.streams * w.pushes[0].Len)
	return res, nil
}

// client is proxy i: it syncs, says so with ready, then receives the push,
// ACKs it and waits for the upstream to end the stream.
func (w *w6) client(ctx context.Context, cc *grpc.ClientConn, i int, ready func()) error {
	s, err := openSynced(ctx, cc, w.initial[i], w.syncs[i], w.ackSync[i], fmt.Sprintf("stream %d sync", i))
	if err != nil {
		return err
	}
	ready()
	if err := acceptPush(s, w.pushes[i], w.ackPush[i], fmt.Sprintf("stream %d push", i)); err != nil {
		return err
	}
	return expectEnd(s)
}
