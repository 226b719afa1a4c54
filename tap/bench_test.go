package tap_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// BenchmarkPush20MB measures a 20 MB push (one request, one response) straight
// to the upstream, through the tap, and through the tap with the tracker
// decoding every frame, side by side in one run:
//
//	go test -run '^$' -bench Push20MB -count 6 ./tap/ | benchstat -col /path -
func BenchmarkPush20MB(b *testing.B) {
	push := make([]byte, 20<<20)
	rand.Read(push)
	up := xdstest.ServeRawUpstream(b, xdstest.ListenTCP(b), answerEachRequestWith(push))
	_, tapAddr := startTap(b, tap.Config{Upstream: up.Addr}, nil)
	observer := pipeline.NewObserver(track.New(track.DefaultConfig()))
	_, observedAddr := startTap(b, tap.Config{Upstream: up.Addr, Observer: observer}, nil)
	for _, path := range []struct {
		name string
		addr tap.Address
	}{{"direct", up.Addr}, {"tap", tapAddr}, {"tap+tracker", observedAddr}} {
		b.Run("path="+path.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := xdstest.MustOpenRaw(b, ctx, xdstest.MustDial(b, path.addr), xdstest.ADSMethod)
			// Connection set-up and flow-control window growth are not what
			// this measures: one push first.
			if err := xdstest.Send(s, []byte("warm up")); err != nil {
				b.Fatal(err)
			}
			if _, err := xdstest.Recv(s); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(push)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := xdstest.Send(s, []byte("next")); err != nil {
					b.Fatal(err)
				}
				if _, err := xdstest.Recv(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFanOut measures a CDS push of ~200 KB to 200 streams at once, each
// ACKed (W6 of benchmark in small, in one process), through a tap with
// no observer, with an observer that does nothing — what handing every
// frame to the observation workers costs the relay — and with the tracker,
// side by side in one run:
//
//	go test -run '^$' -bench FanOut -count 6 ./tap/ | benchstat -col /path -
//
// The clients and the upstream share the process and its cores with the
// tap, so the observation's CPU shows in the time per push.
func BenchmarkFanOut(b *testing.B) {
	const streams = 200
	push := xdstest.PushFrame(xdstest.ClusterType, "v1", "n1", xdstest.ClusterAnys(200, 1000))
	ack := xdstest.RequestFrame(nil, xdstest.ClusterType, "v1", "n1", "")
	// Every request, the subscription and each ACK, brings the push again.
	up := xdstest.ServeRawUpstream(b, xdstest.ListenTCP(b), answerEachRequestWith(push))
	_, tapAddr := startTap(b, tap.Config{Upstream: up.Addr}, nil)
	_, noopAddr := startTap(b, tap.Config{Upstream: up.Addr, Observer: tap.ObserverFuncs{}}, nil)
	observer := pipeline.NewObserver(track.New(track.DefaultConfig()))
	_, trackerAddr := startTap(b, tap.Config{Upstream: up.Addr, Observer: observer}, nil)
	for _, path := range []struct {
		name string
		addr tap.Address
	}{{"tap", tapAddr}, {"tap+noop", noopAddr}, {"tap+tracker", trackerAddr}} {
		b.Run("path="+path.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var fleet []grpc.ClientStream
			for i := range streams {
				// A connection per stream, as Envoy and istio-agent open.
				s := xdstest.MustOpenRaw(b, ctx, xdstest.MustDial(b, path.addr), xdstest.ADSMethod)
				node := &core.Node{Id: fmt.Sprintf("sidecar~10.0.%d.%d~proxy-%d.default~default.svc.cluster.local", i/250, i%250, i)}
				if err := xdstest.Send(s, xdstest.RequestFrame(node, xdstest.ClusterType, "", "", "")); err != nil {
					b.Fatal(err)
				}
				fleet = append(fleet, s)
			}
			receive := func() {
				for _, s := range fleet {
					if _, err := xdstest.Recv(s); err != nil {
						b.Fatal(err)
					}
				}
			}
			receive() // the subscriptions' pushes: connection set-up is not what this measures
			b.SetBytes(int64(streams * len(push)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Every ACK first, so that the upstream pushes to every
				// stream at once.
				for _, s := range fleet {
					if err := xdstest.Send(s, ack); err != nil {
						b.Fatal(err)
					}
				}
				receive()
			}
		})
	}
}

// answerEachRequestWith is an upstream that sends push in answer to every
// request of the stream.
func answerEachRequestWith(push []byte) grpc.StreamHandler {
	return answerEach(func([]byte) []byte { return push })
}
