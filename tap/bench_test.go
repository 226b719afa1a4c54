package tap_test

import (
	"context"
	"crypto/rand"
	"testing"

	"google.golang.org/grpc"

	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/xdstest"
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
	up := xdstest.ServeRawUpstream(b, xdstest.ListenTCP(b), func(_ any, s grpc.ServerStream) error {
		for {
			if _, err := xdstest.Recv(s); err != nil {
				return nil
			}
			if err := xdstest.Send(s, push); err != nil {
				return err
			}
		}
	})
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
