package tap_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// Both peers write far more than the flow-control windows hold before either
// reads (the shape of istio#39209). The tap must only ever wait on the peer it
// writes to, so once both start reading, everything arrives.
func TestBothLegsBackpressuredAtOnceDoNotDeadlock(t *testing.T) {
	leakcheck.Check(t)
	const frames, size = 200, 64 << 10 // 12.5 MiB each way, far past 64 KiB windows
	upstreamWrote := make(chan struct{})
	startReading := make(chan struct{})
	var upstreamGot int
	var upstreamDone, clientDone atomic.Bool
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startReading
			for upstreamGot < frames {
				if _, err := xdstest.Recv(s); err != nil {
					return
				}
				upstreamGot++
			}
		}()
		for i := 0; i < frames; i++ {
			if err := xdstest.Send(s, make([]byte, size)); err != nil {
				return err
			}
			if i == 0 {
				close(upstreamWrote)
			}
		}
		upstreamDone.Store(true)
		wg.Wait()
		return nil
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, xdstest.MustDial(t, addr), xdstest.ADSMethod)

	clientWrote := make(chan error, 1)
	go func() {
		for i := 0; i < frames; i++ {
			if err := xdstest.Send(s, make([]byte, size)); err != nil {
				clientWrote <- err
				return
			}
		}
		clientDone.Store(true)
		clientWrote <- nil
	}()
	// Both sides fill every buffer on the way: each writer has either
	// written everything or waits for flow control to let it write more.
	// Only then does anyone read.
	<-upstreamWrote
	xdstest.Eventually(t, "both writers stopped by flow control (or done)", func() bool {
		done := 0
		for _, d := range []*atomic.Bool{&clientDone, &upstreamDone} {
			if d.Load() {
				done++
			}
		}
		return done+leakcheck.Count("TestBothLegsBackpressuredAtOnceDoNotDeadlock", "(*writeQuota).get") >= 2
	})
	close(startReading)
	got := 0
	for got < frames {
		if _, err := xdstest.Recv(s); err != nil {
			t.Fatalf("client read %d of %d frames: %v", got, frames, err)
		}
		got++
	}
	if err := <-clientWrote; err != nil {
		t.Fatalf("client write: %v", err)
	}
	s.CloseSend()
	if _, err := xdstest.Recv(s); err == nil {
		t.Fatal("want the end of the stream")
	}
	if upstreamGot != frames {
		t.Errorf("upstream read %d frames, want %d", upstreamGot, frames)
	}
}
