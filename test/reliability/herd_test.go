package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
	rel "github.com/adstap/adstap/test/reliability"
	"github.com/adstap/adstap/track"
)

// TestReconnectHerd: N SotW streams (200 short, 1,000 long) over a few
// dozen client connections are synced through the tap; then the control
// plane is restarted (an istiod rollout): every stream ends at once, and
// every client reconnects at once to the control plane that comes back on
// the same address, each doing initial request → push → ACK. All must be
// served, and the tracker must show every stream SYNCED on the new version.
// How long it took is the figure.
func TestReconnectHerd(t *testing.T) {
	leakcheck.Check(t)
	streams := rel.Pick(200, 1000)
	conns := rel.Pick(10, 50)
	resources := map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(10, 1000)}
	nodes := make([]string, streams)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("sidecar~10.%d.%d.%d~herd-%d.default~default.svc.cluster.local", i>>16, (i>>8)&255, i&255, i)
	}
	// Each control plane counts the ACKs it received, apart: one that
	// reaches the old one late must not stand in for one the new one lacks.
	countACKs := func(acks *atomic.Int64) server.CallbackFuncs {
		return server.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			if r.ResponseNonce != "" && r.ErrorDetail == nil {
				acks.Add(1)
			}
			return nil
		}}
	}
	var acksOld, acksNew atomic.Int64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	cp := xdstest.StartControlPlane(t, lis, xdstest.WithCallbacks(countACKs(&acksOld)), xdstest.WithoutRecording())
	cp.SetSnapshotFor(t, "v1", resources, nodes...)
	tp := rel.StartTap(t, rel.TapOptions{Upstream: tap.Address{Network: "tcp", Addr: addr}})

	ccs := make([]*grpc.ClientConn, conns)
	for i := range ccs {
		if ccs[i], err = xdstest.Dial(tp.Addr); err != nil {
			t.Fatal(err)
		}
		defer ccs[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), rel.Pick(2*time.Minute, 5*time.Minute))
	defer cancel()

	// Each client syncs, then waits on its stream; when it ends, it
	// reconnects, as Envoy does, after a short jittered backoff.
	synced := [2]sync.WaitGroup{}
	synced[0].Add(streams)
	synced[1].Add(streams)
	var attempts [2]atomic.Int64
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(3, uint64(i)))
			for round, version := range []string{"v1", "v2"} {
				for ctx.Err() == nil {
					attempts[round].Add(1)
					ended, err := syncOnce(ctx, ccs[i%conns], nodes[i], version, func() { synced[round].Done() })
					if err == nil && round == 0 {
						<-ended // the stream lives until the control plane goes away
						break
					}
					if err == nil {
						return
					}
					time.Sleep(time.Duration(50+rng.IntN(100)) * time.Millisecond)
				}
			}
		}()
	}
	waitGroup := func(wg *sync.WaitGroup, d time.Duration) bool {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(d):
			return false
		}
	}
	start := time.Now()
	if !waitGroup(&synced[0], time.Minute) {
		cancel()
		wg.Wait()
		t.Fatalf("the first sync of %d streams did not complete within a minute", streams)
	}
	cold := time.Since(start)
	if !xdstest.Until(30*time.Second, func() bool { return syncedStreams(tp, "v1") == streams }) {
		t.Fatalf("the tracker shows %d of %d streams SYNCED on v1", syncedStreams(tp, "v1"), streams)
	}
	if !xdstest.Until(30*time.Second, func() bool { return acksOld.Load() >= int64(streams) }) {
		t.Errorf("the first control plane received %d ACKs, want %d", acksOld.Load(), streams)
	}
	// The cold start was a herd too; let its episode end (on the tracker's
	// next ticks) so the reconnect's is a new one.
	if !xdstest.Until(10*time.Second, func() bool {
		ev := tp.Events.Counts()
		return ev.DetectorsEnded[track.DetectorReconnectHerd] == ev.DetectorsStarted[track.DetectorReconnectHerd]
	}) {
		t.Errorf("the reconnect herd episode of the cold start never ended")
	}
	herdsBefore := tp.Events.Counts().DetectorsStarted[track.DetectorReconnectHerd]

	// The rollout: the control plane goes, every stream ends; a new one
	// comes up on the same address with the next version.
	restart := time.Now()
	cp.Stop()
	lis2, err := listenAgain(addr)
	if err != nil {
		t.Fatal(err)
	}
	cp2 := xdstest.StartControlPlane(t, lis2, xdstest.WithCallbacks(countACKs(&acksNew)), xdstest.WithoutRecording())
	cp2.SetSnapshotFor(t, "v2", resources, nodes...)
	up := time.Since(restart)
	if !waitGroup(&synced[1], rel.Pick(time.Minute, 3*time.Minute)) {
		cancel()
		wg.Wait()
		t.Fatalf("the herd of %d reconnects was not all served", streams)
	}
	clientsDone := time.Since(restart)
	if !xdstest.Until(60*time.Second, func() bool { return syncedStreams(tp, "v2") == streams }) {
		t.Errorf("the tracker shows %d of %d streams SYNCED on v2", syncedStreams(tp, "v2"), streams)
	}
	trackerDone := time.Since(restart)
	// The tap observes a frame before it forwards it, so the tracker can
	// show an ACK that is still on its way to the control plane: wait for
	// them to arrive before the clients hang up, which would cancel them.
	if !xdstest.Until(30*time.Second, func() bool { return acksNew.Load() >= int64(streams) }) {
		t.Errorf("the new control plane received %d ACKs, want %d", acksNew.Load(), streams)
	}
	cancel()
	wg.Wait()
	ev := tp.Events.Counts()
	if ev.Gaps != 0 {
		t.Errorf("the observer skipped %d frames in the herd", ev.Gaps)
	}
	herds := ev.DetectorsStarted[track.DetectorReconnectHerd] - herdsBefore
	rel.Figure(t, "herd-cold-sync", "%d streams over %d connections synced (initial request, push, ACK) %s after they all started", streams, conns, cold.Round(time.Millisecond))
	rel.Figure(t, "herd-reconnect", "%d streams re-synced %s after the control plane restarted (it was back after %s; %d attempts); the tracker showed all SYNCED on v2 after %s",
		streams, clientsDone.Round(time.Millisecond), up.Round(time.Millisecond), attempts[1].Load(), trackerDone.Round(time.Millisecond))
	rel.Figure(t, "herd-detected", "reconnect_herd started %d time(s) in the reconnect", herds)
}

// syncOnce opens a stream on cc as node, asks for clusters, ACKs the push if
// it is version, and calls synced. The stream then stays open until it
// ends; ended is closed then.
func syncOnce(ctx context.Context, cc *grpc.ClientConn, node, version string, synced func()) (ended chan struct{}, err error) {
	sctx, cancel := context.WithCancel(ctx)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	fail := func(err error) (chan struct{}, error) {
		cancel()
		return nil, err
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node, Cluster: "herd"}, TypeUrl: resource.ClusterType}); err != nil {
		return fail(err)
	}
	r, err := s.Recv()
	if err != nil {
		return fail(err)
	}
	if r.VersionInfo != version {
		return fail(fmt.Errorf("got version %q, want %q", r.VersionInfo, version))
	}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}); err != nil {
		return fail(err)
	}
	synced()
	ended = make(chan struct{})
	go func() {
		defer close(ended)
		defer cancel()
		for {
			if _, err := s.Recv(); err != nil {
				return
			}
		}
	}()
	return ended, nil
}

// syncedStreams counts the streams whose CDS the tracker shows SYNCED on version.
func syncedStreams(tp *rel.Tap, version string) int {
	n := 0
	for _, s := range tp.Tracker.Streams("") {
		if ts := s.Types[xdstest.ClusterType]; ts != nil && ts.State == "SYNCED" && ts.LastAckedVersion == version {
			n++
		}
	}
	return n
}

func listenAgain(addr string) (net.Listener, error) {
	var err error
	for try := 0; try < 100; try++ {
		var lis net.Listener
		if lis, err = net.Listen("tcp", addr); err == nil {
			return lis, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}
