package reliability_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
	rel "github.com/adstap/adstap/test/reliability"
	"github.com/adstap/adstap/track"
)

// TestNACKLoopAtFullSpeed: a client NACKs every push as fast as it can, and
// go-control-plane's snapshot cache, seeing a version the client has not
// accepted, re-sends it at once: the loop the demo shows, at full speed for
// 3s (short) or 60s (long). The tap must keep up (no frame unobserved, every
// NACK tracked), detect the loop (the tracker's event and
// adstap_nack_loops_total), hold back the identical NACK lines in the live
// log, and keep its memory flat.
func TestNACKLoopAtFullSpeed(t *testing.T) {
	leakcheck.Check(t)
	duration := rel.Pick(3*time.Second, 60*time.Second)
	const node = "sidecar~10.0.0.8~looping.default~default.svc.cluster.local"
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), xdstest.WithoutRecording())
	cp.SetSnapshot(t, node, "2026-11-30T10:00:00Z/1", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(20, 2000)})
	tp := rel.StartTap(t, rel.TapOptions{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*duration+time.Minute)
	defer cancel()

	// The same loop straight to the control plane first, for the rate
	// without the tap.
	directNACKs, directElapsed := nackLoop(t, ctx, cp.Addr(), node, min(duration/3, 5*time.Second), nil)

	const samples = 12
	var heap []uint64
	var loopActiveSeen float64
	start := time.Now()
	nextSample := start
	nacks, elapsed := nackLoop(t, ctx, tp.Addr.Addr, node, duration, func() {
		if time.Now().After(nextSample) {
			heap = append(heap, rel.HeapAfterGC())
			loopActiveSeen = max(loopActiveSeen, tp.Metric(t, "adstap_nack_loop_active", map[string]string{"type": "cds"}))
			nextSample = start.Add(time.Duration(len(heap)) * duration / samples)
		}
	})
	heap = append(heap, rel.HeapAfterGC())
	// The tracker works through what the relay moved at full speed; on a
	// loaded machine that takes a while after the client is done. The
	// bound only catches a tracker that never gets there.
	if !xdstest.Until(time.Minute, func() bool { return tp.Events.Counts().StreamsClosed == 1 }) {
		t.Fatal("the tracker never saw the stream close")
	}
	ev := tp.Events.Counts()
	st := tp.SotW()
	if ev.Gaps != 0 {
		t.Errorf("the observer fell behind: %d frames relayed unobserved", ev.Gaps)
	}
	if ev.Requests[track.KindNACK] != nacks {
		t.Errorf("the tracker saw %d NACKs, the client sent %d", ev.Requests[track.KindNACK], nacks)
	}
	if ev.PushesSent != int(st.Messages[1]) {
		t.Errorf("the tracker saw %d pushes, the relay moved %d", ev.PushesSent, st.Messages[1])
	}
	if ev.DetectorsStarted[track.DetectorNACKLoop] < 1 {
		t.Errorf("the NACK loop was never detected: %+v", ev.DetectorsStarted)
	}
	if loops := tp.Metric(t, "adstap_nack_loops_total", map[string]string{"type": "cds"}); loops < 1 {
		t.Errorf("adstap_nack_loops_total{type=\"cds\"} = %v, want at least 1", loops)
	}
	if loopActiveSeen != 1 {
		t.Errorf("adstap_nack_loop_active{type=\"cds\"} was %v during the loop, want 1", loopActiveSeen)
	}
	// The live log writes an identical NACK at most every 5s.
	nackLines := tp.Log.Count("NACK")
	if limit := int(elapsed/(5*time.Second)) + 10; nackLines > limit {
		t.Errorf("the live log wrote %d lines with NACK for %d identical NACKs; want at most %d", nackLines, nacks, limit)
	}
	third := len(heap) / 3
	firstThird, lastThird := mean(heap[:third]), mean(heap[len(heap)-third:])
	growth := lastThird - firstThird
	if growth > 0.25*firstThird+8<<20 {
		t.Errorf("heap after GC grew from %.1f MiB (first third) to %.1f MiB (last third) over the loop", firstThird/(1<<20), lastThird/(1<<20))
	}
	rel.Figure(t, "nack-loop-rate", "%.0f NACKs/s through the tap (%d NACKs in %s), every one tracked", float64(nacks)/elapsed.Seconds(), nacks, elapsed.Round(time.Millisecond))
	rel.Figure(t, "nack-loop-rate-direct", "%.0f NACKs/s straight to the control plane (%d NACKs in %s)", float64(directNACKs)/directElapsed.Seconds(), directNACKs, directElapsed.Round(time.Millisecond))
	rel.Figure(t, "nack-loop-detected", "nack_loop started %d time(s), adstap_nack_loop_active 1 during the loop", ev.DetectorsStarted[track.DetectorNACKLoop])
	rel.Figure(t, "nack-loop-heap", "%.1f MiB first third, %.1f MiB last third (%+.1f MiB), %d samples after GC", firstThird/(1<<20), lastThird/(1<<20), growth/(1<<20), len(heap))
	rel.Figure(t, "nack-loop-log-lines", "%d live log lines mention NACK for %d NACKs", nackLines, nacks)
}

func mean(v []uint64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}

// nackLoop opens a SotW stream to addr, asks for clusters as node, and NACKs
// every push at once for d; each is called after every NACK. It half-closes
// and reads the stream to its end before returning the NACKs sent.
func nackLoop(t *testing.T, ctx context.Context, addr, node string, d time.Duration, each func()) (int, time.Duration) {
	t.Helper()
	cc, err := xdstest.Dial(tap.Address{Network: "tcp", Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	nacks := 0
	start := time.Now()
	for time.Since(start) < d {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d NACKs: %v", nacks, err)
		}
		if err := s.Send(&discovery.DiscoveryRequest{
			TypeUrl: resource.ClusterType, ResponseNonce: r.Nonce,
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: "cluster outbound|8080||svc-00003: unexpected lbPolicy MAGLEV"},
		}); err != nil {
			t.Fatalf("NACK %d: %v", nacks+1, err)
		}
		nacks++
		if each != nil {
			each()
		}
	}
	elapsed := time.Since(start)
	s.CloseSend()
	for {
		_, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("end of stream: %v", err)
		}
	}
	return nacks, elapsed
}
