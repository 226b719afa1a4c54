package reliability_test

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
	rel "github.com/adstap/adstap/test/reliability"
)

// TestUpstreamKilledMidPush: the control plane's process is killed (SIGKILL)
// while a 10 MB push is on the wire to the tap. The client's stream must end
// with Unavailable naming the upstream, and its reconnect, on the same
// connection to the tap, must be served by the control plane that comes back
// on the same address, with the push intact.
// killToEnd bounds how long after the upstream is killed the client's stream
// must end. The tap sees the connection reset at once and ends the stream in
// well under a second; the rest is room for the race detector on busy cores,
// still far below the keepalive and retry timers that would otherwise end it.
const killToEnd = 3 * time.Second

func TestUpstreamKilledMidPush(t *testing.T) {
	leakcheck.Check(t)
	const pushBytes = 10 << 20
	const throttle = 20 << 20 // bytes/s: the push takes about half a second to write
	rounds := rel.Pick(1, 5)
	node := &core.Node{Id: "sidecar~10.0.0.1~killed.default~default.svc.cluster.local"}

	child := rel.StartChild(t, rel.ChildOptions{PushBytes: pushBytes, BytesPerSecond: throttle})
	addr := child.Addr
	tp := rel.StartTap(t, rel.TapOptions{Upstream: tap.Address{Network: "tcp", Addr: addr}})
	cc := tp.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var worstEnd, worstServe, worstSinceKill time.Duration
	for round := 1; round <= rounds; round++ {
		sctx, scancel := context.WithCancel(ctx)
		s, err := xdstest.OpenRaw(sctx, cc, xdstest.ADSMethod)
		if err != nil {
			t.Fatal(err)
		}
		if err := xdstest.Send(s, xdstest.RequestFrame(node, xdstest.ClusterType, "", "", "")); err != nil {
			t.Fatal(err)
		}
		type result struct {
			n   int
			err error
			at  time.Time
		}
		got := make(chan result, 1)
		go func() {
			b, err := xdstest.Recv(s)
			got <- result{len(b), err, time.Now()}
		}()
		if _, ok := child.WaitLine(30*time.Second, "PUSHING"); !ok {
			t.Fatal("the child upstream never started its push")
		}
		// Kill once at least 3 MiB of the push are on the wire.
		for {
			line, ok := child.WaitLine(30*time.Second, "WROTE ")
			if !ok {
				t.Fatal("the child upstream stopped writing before 3 MiB")
			}
			if n, _ := strconv.Atoi(strings.TrimPrefix(line, "WROTE ")); n >= 3<<20 {
				break
			}
		}
		killedAt := child.Kill()
		// The client must learn of the kill from the tap promptly, not from
		// a keepalive or its own deadline: the wait is bounded from the kill.
		deadline := time.NewTimer(time.Until(killedAt.Add(killToEnd)))
		var r result
		select {
		case r = <-got:
			deadline.Stop()
		case <-deadline.C:
			t.Fatalf("round %d: the client's stream did not end within %v of the upstream being killed", round, killToEnd)
		}
		scancel()
		end := r.at.Sub(killedAt)
		st := status.Convert(r.err)
		if r.err == nil {
			t.Fatalf("round %d: the client received a %d-byte message from a push cut in the middle", round, r.n)
		}
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), addr) {
			t.Errorf("round %d: stream ended with %v, want Unavailable naming the upstream %s", round, st, addr)
		}
		if end > killToEnd {
			t.Errorf("round %d: the stream ended %v after the kill; want under %v", round, end, killToEnd)
		}

		// The control plane comes back on the same address; the client
		// retries on its connection to the tap, as Envoy does.
		child = rel.StartChild(t, rel.ChildOptions{Addr: addr, PushBytes: pushBytes})
		upAt := time.Now()
		attempts, hash, err := fetchPush(ctx, cc, node)
		if err != nil {
			t.Fatalf("round %d: the reconnect was never served: %v", round, err)
		}
		served := time.Now()
		if hash != child.PushHash {
			t.Errorf("round %d: the push after the reconnect arrived changed", round)
		}
		t.Logf("round %d: Unavailable %v after the kill; reconnect served %v after the upstream was back (%v after the kill), %d attempts",
			round, end, served.Sub(upAt), served.Sub(killedAt), attempts)
		worstEnd = max(worstEnd, end)
		worstServe = max(worstServe, served.Sub(upAt))
		worstSinceKill = max(worstSinceKill, served.Sub(killedAt))
		if round < rounds {
			// The next round needs a throttled upstream to kill again.
			child.Kill()
			child = rel.StartChild(t, rel.ChildOptions{Addr: addr, PushBytes: pushBytes, BytesPerSecond: throttle})
		}
	}
	rel.Figure(t, "kill-to-unavailable", "%s (worst of %d kills mid 10 MB push)", rel.Ms(worstEnd), rounds)
	rel.Figure(t, "upstream-back-to-reconnect-served", "%s (worst of %d, 10 MB push received whole)", rel.Ms(worstServe), rounds)
	rel.Figure(t, "kill-to-reconnect-served", "%s (worst of %d)", rel.Ms(worstSinceKill), rounds)
}

// fetchPush opens streams on cc until one is answered with a whole push,
// sleeping 100ms between attempts, and returns the push's sha256.
func fetchPush(ctx context.Context, cc *grpc.ClientConn, node *core.Node) (attempts int, hash [32]byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		attempts++
		b, err := func() ([]byte, error) {
			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			s, err := xdstest.OpenRaw(sctx, cc, xdstest.ADSMethod)
			if err != nil {
				return nil, err
			}
			if err := xdstest.Send(s, xdstest.RequestFrame(node, xdstest.ClusterType, "", "", "")); err != nil {
				return nil, err
			}
			return xdstest.Recv(s)
		}()
		if err == nil {
			return attempts, sha256.Sum256(b), nil
		}
		select {
		case <-ctx.Done():
			return attempts, hash, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
