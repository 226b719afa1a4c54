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
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// w2 is many proxies receiving small EDS updates: each of its streams (one
// per connection, as each proxy has its own) subscribes to one cluster and
// receives a 1 KB ClusterLoadAssignment every interval, and ACKs each. The
// streams' pushes are spread evenly over the interval, a steady flow of
// endpoint changes across the mesh. The latency of a push is the time from
// the upstream sending it to the upstream receiving its ACK. The measured
// rounds follow warm rounds of the same flow, so that they measure a flow
// that has lasted (the tap's collector sets its headroom by the flow,
// internal/gctune), and start right after a collection in the middle.
type w2 struct {
	streams, warm, rounds int
	interval              time.Duration
	initial               [][]byte   // per stream
	pushes                [][]msg    // per stream, per round: round 0 syncs, then the warm rounds, then the measured
	nonces                []string   // per round
	acks                  [][][]byte // per stream, per round
	index                 map[string]int
}

// newW2 builds W2's pushes.
func newW2(s Sizes) *w2 {
	w := &w2{streams: s.W2Streams, warm: s.W2Warm, rounds: s.W2Rounds, interval: s.W2Interval, index: map[string]int{}}
	n := 1
	for proto.Size(endpoints(clusterName(0), n+1, 0)) <= s.W2Size {
		n++
	}
	total := 1 + s.W2Warm + s.W2Rounds
	for r := range total {
		w.nonces = append(w.nonces, pushNonce("w2", r))
	}
	for i := range s.W2Streams {
		name := clusterName(i)
		w.index[name] = i
		w.initial = append(w.initial, mustMarshal(&discovery.DiscoveryRequest{
			Node: node(i), TypeUrl: codec.TypeEndpoint, ResourceNames: []string{name},
		}))
		var pushes []msg
		var acks [][]byte
		for r := range total {
			v := pushVersion("w2", r)
			pushes = append(pushes, sotwPush(v, w.nonces[r], codec.TypeEndpoint, sotwBody([]proto.Message{endpoints(name, n, r)})))
			acks = append(acks, sotwACK(v, w.nonces[r], codec.TypeEndpoint, []string{name}))
		}
		w.pushes = append(w.pushes, pushes)
		w.acks = append(w.acks, acks)
	}
	return w
}

func (*w2) ID() string { return "W2" }

func (w *w2) Describe() string {
	return fmt.Sprintf("%d streams, one EDS update of %d B each per %v, ACKed, %d rounds after %d warm ones",
		w.streams, w.pushes[0][0].Len, w.interval, w.rounds, w.warm)
}

func (w *w2) Run(ctx context.Context, start StartMiddle) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	var (
		errs      = newFirstError()
		acks      atomic.Int64
		ready     atomic.Int64
		allReady  = make(chan struct{})
		warmGate  = make(chan struct{})
		warmStart time.Time // written before warmGate closes
		warmed    atomic.Int64
		allWarm   = make(chan struct{})
		gate      = make(chan struct{})
		startTime time.Time // written before gate closes
		opened    = make([]atomic.Bool, w.streams)
		// Each stream's handler hands its latencies over here before it
		// ends the stream, so they are all in once every client has seen
		// its stream end.
		latencies = make(chan []time.Duration, w.streams)
	)
	m, stop, err := startPath(start, func(method string, s grpc.ServerStream) error {
		if method != methodSotW {
			return wrongMethod(errs, method, methodSotW)
		}
		var req discovery.DiscoveryRequest
		if err := recvRequest(s, &req); err != nil {
			return upstreamFailed(errs, err)
		}
		i, ok := w.index[first(req.ResourceNames)]
		if !ok || req.TypeUrl != codec.TypeEndpoint || opened[i].Swap(true) {
			return upstreamFailed(errs, fmt.Errorf("unexpected first request for %q %v", req.TypeUrl, req.ResourceNames))
		}
		lat := make([]time.Duration, 0, w.rounds)
		for r := range w.pushes[i] {
			if r == 1 {
				if ready.Add(1) == int64(w.streams) {
					close(allReady)
				}
				if err := waitGate(s, warmGate); err != nil {
					return err
				}
			}
			measured := r > w.warm
			if r == 1+w.warm {
				if warmed.Add(1) == int64(w.streams) {
					close(allWarm)
				}
				if err := waitGate(s, gate); err != nil {
					return err
				}
			}
			if r >= 1 {
				from, n := warmStart, r-1
				if measured {
					from, n = startTime, r-1-w.warm
				}
				at := from.Add(w.interval*time.Duration(n) + w.interval*time.Duration(i)/time.Duration(w.streams))
				time.Sleep(time.Until(at))
			}
			sent := time.Now()
			if err := pushAndExpectACK(s, w.pushes[i][r], w.nonces[r]); err != nil {
				return upstreamFailed(errs, err)
			}
			if r >= 1 && measured {
				lat = append(lat, time.Since(sent))
			}
			acks.Add(1)
		}
		latencies <- lat
		return nil
	})
	if err != nil {
		return res, err
	}
	defer func() { err = firstOf(err, stop()) }()

	var clients sync.WaitGroup
	clientErrs := newFirstError()
	for i := range w.streams {
		cc, err := dialRaw(m.Addr())
		if err != nil {
			return res, err
		}
		defer cc.Close()
		clients.Add(1)
		go func() {
			defer clients.Done()
			clientErrs.set(w.client(ctx, cc, i))
		}()
	}
	done := make(chan struct{})
	go func() {
		clients.Wait()
		close(done)
	}()
	// await waits for every stream to reach a phase (ch closed), or says
	// why they did not, once every client has ended.
	await := func(ch <-chan struct{}, what string) error {
		select {
		case <-ch:
			return nil
		case <-done:
			return firstOf(errs.get(), clientErrs.get(), fmt.Errorf("clients ended before %s", what))
		case <-clientErrs.failed:
			cancel()
			<-done
			return firstOf(clientErrs.get(), errs.get())
		case <-errs.failed:
			cancel()
			<-done
			return firstOf(errs.get(), clientErrs.get())
		case <-ctx.Done():
			cancel()
			<-done
			return firstOf(errs.get(), clientErrs.get(), fmt.Errorf("%s not reached: %w", what, ctx.Err()))
		}
	}
	if err := await(allReady, "every stream was up"); err != nil {
		return res, err
	}
	warmStart = time.Now()
	close(warmGate)
	if err := await(allWarm, "the warm rounds ended"); err != nil {
		return res, err
	}
	// Every path's window starts right after a collection, as W6's does:
	// the collections in it are then the middle's own pace (what a push
	// allocates against its heap's goal), not wherever the warm-up left its
	// collector. Each makes a hundred slow pushes at once, so one more or
	// less in a repetition moved its p99 by half.
	if _, err := m.SampleAfterGC(); err != nil {
		cancel()
		<-done
		return res, err
	}
	if err := m.Begin(); err != nil {
		cancel()
		<-done
		return res, err
	}
	startTime = time.Now()
	close(gate)
	select {
	case <-done:
	case <-clientErrs.failed:
		cancel()
		<-done
	case <-errs.failed:
		cancel()
		<-done
	}
	res.Wall = time.Since(startTime)
	if res.Middle, err = m.End(); err != nil {
		return res, err
	}
	if err := firstOf(errs.get(), clientErrs.get()); err != nil {
		return res, err
	}
	res.ACKs, res.Streams = int(acks.Load()), w.streams
	if want := w.streams * (1 + w.warm + w.rounds); res.ACKs != want {
		return res, fmt.Errorf("upstream counted %d ACKs, want %d", res.ACKs, want)
	}
	for range w.streams {
		l := <-latencies
		res.Latencies = append(res.Latencies, l...)
		res.Pushes += len(l)
		res.Bytes += int64(len(l) * w.pushes[0][1].Len)
	}
	return res, nil
}

// client is proxy i: it subscribes, checks each push and ACKs it.
func (w *w2) client(ctx context.Context, cc *grpc.ClientConn, i int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := xdstest.OpenRaw(ctx, cc, methodSotW)
	if err != nil {
		return err
	}
	if err := sendBytes(s, w.initial[i]); err != nil {
		return err
	}
	for r, p := range w.pushes[i] {
		if err := acceptPush(s, p, w.acks[i][r], fmt.Sprintf("stream %d push %d", i, r)); err != nil {
			return err
		}
	}
	return expectEnd(s)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
