package reliability_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	rel "github.com/adstap/adstap/test/reliability"
)

// TestDownstreamThatStopsReading: the control plane tries to push far more
// than any buffer holds (64 MiB short, 500 MiB long, in 1 MiB pushes) to a
// client that has stopped reading. The control plane's sends must block
// within a few flow-control windows, the heap must stay within a few windows
// and a push, and once the client reads again every push must arrive, whole
// and in order.
func TestDownstreamThatStopsReading(t *testing.T) {
	leakcheck.Check(t)
	const pushSize = 1 << 20
	total := rel.Pick(64, 500) // pushes of 1 MiB
	// gRPC's BDP estimator grows a stream's and a connection's window to at
	// most 16 MiB; the data waiting is bounded by the windows of the two
	// legs, plus the push the tap holds and what the transports buffer.
	const window = 16 << 20
	const bound = 4*window + 4*pushSize

	resource := xdstest.ClusterAnys(1, pushSize-200)
	var sent atomic.Int64
	var lastSent atomic.Int64 // unix nanoseconds of the last send that returned
	sentChain := rel.NewChain(true)
	var chainMu sync.Mutex
	upDone := make(chan error, 1)
	up := xdstest.StartRawUpstream(t, func(_ any, s grpc.ServerStream) error {
		if _, err := xdstest.Recv(s); err != nil {
			return err
		}
		err := func() error {
			for i := range total {
				b := xdstest.PushFrame(xdstest.ClusterType, "v"+strconv.Itoa(i), strconv.Itoa(i), []*anypb.Any{resource[0]})
				chainMu.Lock()
				sentChain.Add(b)
				chainMu.Unlock()
				if err := xdstest.Send(s, b); err != nil {
					return err
				}
				sent.Add(1)
				lastSent.Store(time.Now().UnixNano())
			}
			return nil
		}()
		upDone <- err
		if err != nil {
			return err
		}
		xdstest.Recv(s) // until the client half-closes
		return nil
	})
	tp := rel.StartTap(t, rel.TapOptions{Upstream: up.Addr})
	cc := tp.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	before := rel.HeapAfterGC()
	s := rel.OpenADS(t, ctx, cc)
	if err := xdstest.Send(s, xdstest.RequestFrame(&core.Node{Id: "stops-reading"}, xdstest.ClusterType, "", "", "")); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing. Wait until the control plane has sent
	// nothing for 2s.
	const still = 2 * time.Second
	if !xdstest.Until(time.Minute, func() bool {
		last := lastSent.Load()
		return last != 0 && time.Since(time.Unix(0, last)) > still
	}) {
		t.Fatalf("the control plane never blocked: %d of %d pushes sent", sent.Load(), total)
	}
	blockedAt := sent.Load()
	if blockedAt >= int64(total) {
		t.Fatalf("the control plane sent all %d pushes to a client that reads nothing", total)
	}
	// Nothing sent for 2 s, short of the end: the tap holds the rest back
	// rather than buffering it. A second look after a sleep would only
	// repeat that check.
	stalled := rel.HeapAfterGC()
	growth := int64(stalled) - int64(before)
	relayed := tp.SotW().Messages[1]
	if growth > bound {
		t.Errorf("heap grew by %.1f MiB with the client not reading; want at most %.0f MiB (4 windows and 4 pushes)", float64(growth)/(1<<20), float64(bound)/(1<<20))
	}

	// The client reads again: everything arrives, whole and in order.
	start := time.Now()
	got := rel.NewChain(false)
	for got.Len() < total {
		b, err := xdstest.Recv(s)
		if err != nil {
			t.Fatalf("after %d of %d pushes: %v", got.Len(), total, err)
		}
		got.Add(b)
	}
	resumed := time.Since(start)
	select {
	case err := <-upDone:
		if err != nil {
			t.Fatalf("the control plane's sends failed: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the control plane's sends never completed")
	}
	chainMu.Lock()
	intact := got.IsPrefixOf(sentChain) && got.Len() == sentChain.Len()
	chainMu.Unlock()
	if !intact {
		t.Errorf("the %d pushes arrived changed or out of order", got.Len())
	}
	s.CloseSend()

	rel.Figure(t, "stop-reading-blocked-after", "%d of %d pushes of 1 MiB sent when the control plane blocked (%d relayed by the tap)", blockedAt, total, relayed)
	rel.Figure(t, "stop-reading-heap-growth", "%.1f MiB (bound %.0f MiB) while %d MiB waited to be pushed", float64(growth)/(1<<20), float64(bound)/(1<<20), int64(total)-blockedAt)
	rel.Figure(t, "stop-reading-resume", "%d MiB read in %s after the client read again (%.0f MiB/s)", total, resumed.Round(time.Millisecond), float64(total)/resumed.Seconds())
}
