package benchmark

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// w3 is many idle, synced proxies: each stream (one per connection) gets
// its clusters and their endpoints, ACKs both, and then nothing happens.
// What it measures is the middle's resident memory, goroutines and file
// descriptors: with no stream, and with every stream synced and left idle
// for a while. W5 is the same with more streams.
type w3 struct {
	id         string
	streams    int
	sources    int // client source addresses, 127.0.0.1 onwards
	settle     time.Duration
	initial    [][]byte // per stream
	cds, eds   msg
	cdsNonce   string
	edsNonce   string
	ackCDS     []byte
	edsRequest []byte
	ackEDS     []byte
}

// newW3 builds W3's pushes: every stream receives the same ones.
func newW3(s Sizes) *w3 { return newIdle("W3", s.W3Streams, s.W3Clusters, 1, s.W3Settle) }

// newW5 is W3 with W5's number of streams, spread over W5Sources client
// addresses (each address has its own ephemeral ports towards the middle).
func newW5(s Sizes) *w3 { return newIdle("W5", s.W5Streams, s.W3Clusters, s.W5Sources, s.W3Settle) }

func newIdle(id string, streams, clusterCount, sources int, settle time.Duration) *w3 {
	w := &w3{id: id, streams: streams, sources: max(1, sources), settle: settle}
	clusters := xdsconfig.Clusters(clusterCount, 1000)
	var cds, eds []proto.Message
	var names []string
	for i, c := range clusters {
		cds = append(cds, c)
		names = append(names, clusterName(i))
		eds = append(eds, endpoints(clusterName(i), 3, i))
	}
	w.cdsNonce, w.edsNonce = pushNonce("w3-cds", 1), pushNonce("w3-eds", 1)
	w.cds = sotwPush(pushVersion("w3", 1), w.cdsNonce, codec.TypeCluster, sotwBody(cds))
	w.eds = sotwPush(pushVersion("w3", 1), w.edsNonce, codec.TypeEndpoint, sotwBody(eds))
	w.ackCDS = sotwACK(pushVersion("w3", 1), w.cdsNonce, codec.TypeCluster, nil)
	w.edsRequest = mustMarshal(&discovery.DiscoveryRequest{TypeUrl: codec.TypeEndpoint, ResourceNames: names})
	w.ackEDS = sotwACK(pushVersion("w3", 1), w.edsNonce, codec.TypeEndpoint, names)
	for i := range streams {
		w.initial = append(w.initial, mustMarshal(&discovery.DiscoveryRequest{Node: node(i), TypeUrl: codec.TypeCluster}))
	}
	return w
}

func (w *w3) ID() string { return w.id }

func (w *w3) Describe() string {
	return fmt.Sprintf("%d streams, one connection each, synced (CDS %s + EDS %s, ACKed) then idle %v", w.streams, sizeMB(w.cds.Len), sizeMB(w.eds.Len), w.settle)
}

func (w *w3) Run(ctx context.Context, start StartMiddle) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	var (
		errs     = newFirstError()
		acks     atomic.Int64
		synced   atomic.Int64
		allSync  = make(chan struct{})
		release  = make(chan struct{})
		released = sync.OnceFunc(func() { close(release) })
	)
	defer released()
	m, stop, err := startPath(start, func(method string, s grpc.ServerStream) error {
		if method != methodSotW {
			return wrongMethod(errs, method, methodSotW)
		}
		var req discovery.DiscoveryRequest
		if err := recvRequest(s, &req); err != nil {
			return upstreamFailed(errs, err)
		}
		if req.TypeUrl != codec.TypeCluster {
			return upstreamFailed(errs, fmt.Errorf("first request for %q", req.TypeUrl))
		}
		if err := pushAndExpectACK(s, w.cds, w.cdsNonce); err != nil {
			return upstreamFailed(errs, err)
		}
		acks.Add(1)
		req.Reset()
		if err := recvRequest(s, &req); err != nil {
			return upstreamFailed(errs, err)
		}
		if req.TypeUrl != codec.TypeEndpoint || req.ResponseNonce != "" {
			return upstreamFailed(errs, fmt.Errorf("want an EDS subscription, got a request for %q answering %q", req.TypeUrl, req.ResponseNonce))
		}
		if err := pushAndExpectACK(s, w.eds, w.edsNonce); err != nil {
			return upstreamFailed(errs, err)
		}
		acks.Add(1)
		if synced.Add(1) == int64(w.streams) {
			close(allSync)
		}
		return waitGate(s, release)
	})
	if err != nil {
		return res, err
	}
	defer func() { err = firstOf(err, stop()) }()
	// The middle as it starts, before any client: give its start-up a
	// moment to settle.
	time.Sleep(min(w.settle, 500*time.Millisecond))
	if res.Idle, err = m.Sample(); err != nil {
		return res, err
	}
	if err := m.Begin(); err != nil {
		return res, err
	}
	t0 := time.Now()
	clients := startFleet(ctx, m.Addr(), w.streams, w.sources, func(cc *grpc.ClientConn, i int, ready func()) error {
		return w.client(ctx, cc, i, ready)
	})
	defer func() {
		released()
		cancel()
		<-clients.done
		clients.closeConns()
	}()
	if err := clients.waitFor(ctx, errs, allSync, "every stream synced"); err != nil {
		return res, err
	}
	res.Wall = time.Since(t0)
	if res.Middle, err = m.End(); err != nil {
		return res, err
	}
	time.Sleep(w.settle)
	if res.Settled, err = m.Sample(); err != nil {
		return res, err
	}
	if res.Collected, err = m.SampleAfterGC(); err != nil {
		return res, err
	}
	released()
	if err := clients.end(ctx, errs); err != nil {
		return res, err
	}
	res.ACKs, res.Streams, res.Pushes = int(acks.Load()), w.streams, 2*w.streams
	res.Bytes = int64(w.streams * (w.cds.Len + w.eds.Len))
	if res.ACKs != 2*w.streams {
		return res, fmt.Errorf("upstream counted %d ACKs, want %d", res.ACKs, 2*w.streams)
	}
	return res, nil
}

// client is proxy i: it syncs CDS and EDS, says so with ready, and waits
// for the upstream to end its stream.
func (w *w3) client(ctx context.Context, cc *grpc.ClientConn, i int, ready func()) error {
	s, err := openSynced(ctx, cc, w.initial[i], w.cds, w.ackCDS, fmt.Sprintf("stream %d CDS", i))
	if err != nil {
		return err
	}
	if err := sendBytes(s, w.edsRequest); err != nil {
		return err
	}
	if err := acceptPush(s, w.eds, w.ackEDS, fmt.Sprintf("stream %d EDS", i)); err != nil {
		return err
	}
	ready()
	return expectEnd(s)
}
