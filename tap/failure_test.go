package tap_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

func TestUpstreamUnreachableIsUnavailableAndTheNextAttemptIsServed(t *testing.T) {
	leakcheck.Check(t)
	sock := filepath.Join(t.TempDir(), "cp.sock")
	upAddr := tap.Address{Network: "unix", Addr: sock}
	_, addr := startTap(t, tap.Config{Upstream: upAddr}, nil)
	cc := xdstest.MustDial(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	_, err := xdstest.Recv(s)
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "unix://"+sock) {
		t.Fatalf("with no upstream: status = %v, want Unavailable naming unix://%s", st, sock)
	}

	// The control plane comes up; the client's next attempt, on the same
	// connection to the tap, must reach it.
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	xdstest.ServeRawUpstream(t, lis, echoReversed(&digestLog{}))
	for {
		s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
		if err := xdstest.Send(s, []byte("ab")); err == nil {
			if b, err := xdstest.Recv(s); err == nil {
				if string(b) != "ba" {
					t.Fatalf("got %q, want \"ba\"", b)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("the tap never reached the upstream once it was up")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestUpstreamKilledMidStreamEndsDownstreamWithUnavailable(t *testing.T) {
	leakcheck.Check(t)
	sent := make(chan struct{})
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		if err := xdstest.Send(s, []byte("first push")); err != nil {
			return err
		}
		close(sent)
		<-s.Context().Done()
		return nil
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	if _, err := xdstest.Recv(s); err != nil {
		t.Fatalf("first push: %v", err)
	}
	<-sent
	up.Stop()
	_, err := xdstest.Recv(s)
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), up.Addr.Addr) {
		t.Errorf("after the upstream died: status = %v, want Unavailable naming %s", st, up.Addr.Addr)
	}
}

func TestOversizedMessagesFailWithResourceExhaustedBothWays(t *testing.T) {
	leakcheck.Check(t)
	const limit = 1 << 20
	big := make([]byte, 2<<20)
	upstreamCancelled := make(chan struct{}, 2)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		b, err := xdstest.Recv(s)
		if err != nil {
			upstreamCancelled <- struct{}{}
			return err
		}
		if string(b) == "send me something big" {
			return xdstest.Send(s, big)
		}
		return nil
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr, MaxMessageSize: limit}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	t.Run("request", func(t *testing.T) {
		s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
		xdstest.Send(s, big)
		_, err := xdstest.Recv(s)
		// gRPC writes this status itself the moment it refuses the message.
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max (2097152 vs. 1048576)") {
			t.Errorf("status = %v, want ResourceExhausted with the sizes", st)
		}
	})
	t.Run("response", func(t *testing.T) {
		s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
		if err := xdstest.Send(s, []byte("send me something big")); err != nil {
			t.Fatal(err)
		}
		_, err := xdstest.Recv(s)
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "response message from upstream") {
			t.Errorf("status = %v, want ResourceExhausted about the upstream's response", st)
		}
	})
}

func TestTwentyMegabyteMessagesPassIntact(t *testing.T) {
	leakcheck.Check(t)
	big := make([]byte, 20<<20)
	rand.Read(big)
	want := sha256.Sum256(big)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		b, err := xdstest.Recv(s)
		if err != nil {
			return err
		}
		if sha256.Sum256(b) != want {
			return status.Error(codes.DataLoss, "the request arrived changed")
		}
		return xdstest.Send(s, b)
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	if err := xdstest.Send(s, big); err != nil {
		t.Fatal(err)
	}
	b, err := xdstest.Recv(s)
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	if sha256.Sum256(b) != want {
		t.Errorf("the 20 MB response arrived changed (len %d)", len(b))
	}
}

func TestShutdownEndsStreamsWithUnavailable(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		<-s.Context().Done()
		return nil
	})
	lis := xdstest.ListenTCP(t)
	srv, err := tap.New(tap.Config{Upstream: up.Addr})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	cc := xdstest.MustDial(t, xdstest.AddressOf(lis))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	if err := xdstest.Send(s, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// Wait until the stream is relayed before draining.
	xdstest.Eventually(t, "the client connection READY", func() bool { return cc.GetState().String() == "READY" })

	shutdownDone := make(chan struct{})
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
		close(shutdownDone)
	}()
	_, err = xdstest.Recv(s)
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "shutting down") {
		t.Errorf("during shutdown: status = %v, want Unavailable \"shutting down\"", st)
	}
	select {
	case <-shutdownDone:
	case <-time.After(15 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v after Shutdown, want nil", err)
	}
	if !srv.Draining() {
		t.Error("Draining() = false after Shutdown")
	}
	if c, err := net.DialTimeout("tcp", lis.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts connections after Shutdown")
	}
}
