package tap_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// A push of the same bytes to many streams, but for a nonce of each, as
// istiod's full push, is held for the observer once: while the frames wait,
// the queues hold one stream's bytes, one copy shared by the others and
// each stream's own nonce, not a push for every stream. And the observer
// still sees, for each stream, the very bytes the client received.
func TestTheSamePushToManyStreamsIsHeldOnce(t *testing.T) {
	leakcheck.Check(t)
	const streams, size, nonceAt = 12, 200 << 10, 200<<10 - 300
	body := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	// Each request is a stream's nonce; its answer is the push with the
	// nonce written in, a few hundred bytes before the end, as a
	// DiscoveryResponse's nonce comes before its control_plane.
	push := func(nonce []byte) []byte {
		b := bytes.Clone(body)
		copy(b[nonceAt:], nonce)
		return b
	}
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), answerEach(push))

	// The observer waits before it opens the first stream, so every frame
	// waits on the queues until it is released.
	release := make(chan struct{})
	var mu sync.Mutex
	observed := map[uint64][]byte{} // stream ID -> the response it observed
	obs := tap.ObserverFuncs{
		StreamOpenFunc: func(tap.StreamInfo) { <-release },
		FrameFunc: func(info tap.StreamInfo, f tap.Frame) {
			if f.Direction == tap.Response {
				mu.Lock()
				observed[info.ID] = f.Data.Materialize()
				mu.Unlock()
			}
		},
	}
	srv, addr := startTap(t, tap.Config{Upstream: up.Addr, Observer: obs, ObserveWorkers: 1}, nil)
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo) // before the tap's shutdown, should the test end early
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var received [][]byte
	for i := range streams {
		s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
		nonce := binary.BigEndian.AppendUint64([]byte("nonce-"), uint64(i)*0x9e3779b97f4a7c15)
		if err := xdstest.Send(s, nonce); err != nil {
			t.Fatal(err)
		}
		got, err := xdstest.Recv(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, push(nonce)) {
			t.Fatalf("stream %d received other bytes than the upstream sent", i)
		}
		received = append(received, got)
		defer s.CloseSend()
	}

	// Held: the requests (14 bytes each), the first push as it came, the
	// second as the copy the others share, and the others' nonces.
	held := func() int64 { return srv.ObserveQueue().Bytes }
	most := int64(2*size + streams*(14+14))
	xdstest.Eventually(t, "the pushes to be held once", func() bool { return held() <= most })
	if got, want := srv.ObserveQueue().Folded, uint64(streams-1); got != want {
		t.Errorf("%d frames folded, want %d (all but the first)", got, want)
	}
	letGo()
	xdstest.Eventually(t, "every frame to be observed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(observed) == streams
	})
	mu.Lock()
	defer mu.Unlock()
	want := map[string]bool{}
	for _, r := range received {
		want[string(r)] = true
	}
	for id, b := range observed {
		if !want[string(b)] {
			t.Errorf("stream %d observed bytes no client received, or another stream's too", id)
		}
		delete(want, string(b))
	}
	xdstest.Eventually(t, "every frame to be let go", func() bool { return held() == 0 })
}
