package tap_test

import (
	"context"
	"errors"
	"io"
	"net"
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

// openEcho opens a stream through the tap and waits for one echo, so the
// stream is known to be open at the tap; it returns the stream's error
// instead when the tap refused it.
func openEcho(t *testing.T, ctx context.Context, cc *grpc.ClientConn) (grpc.ClientStream, error) {
	t.Helper()
	s, err := xdstest.OpenRaw(ctx, cc, xdstest.ADSMethod)
	if err != nil {
		return nil, err
	}
	if err := xdstest.Send(s, []byte("hello")); err != nil {
		_, err = xdstest.Recv(s)
		return nil, err
	}
	if _, err := xdstest.Recv(s); err != nil {
		return nil, err
	}
	return s, nil
}

func wantRefused(t *testing.T, err error, flag string) {
	t.Helper()
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), flag) {
		t.Fatalf("stream past the limit: %v, want ResourceExhausted naming %s", err, flag)
	}
}

func TestMaxConcurrentStreams(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.StartRawUpstream(t, echoReversed(&digestLog{}))
	srv, addr := startTap(t, tap.Config{Upstream: up.Addr, MaxConcurrentStreams: 2}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := openEcho(t, ctx, xdstest.MustDial(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openEcho(t, ctx, xdstest.MustDial(t, addr)); err != nil {
		t.Fatal(err)
	}
	_, err = openEcho(t, ctx, xdstest.MustDial(t, addr))
	wantRefused(t, err, "--max-concurrent-streams")
	if got := srv.Refused().Streams; got != 1 {
		t.Errorf("Refused().Streams = %d, want 1", got)
	}
	// A stream that ends makes room.
	first.CloseSend()
	if _, err := xdstest.Recv(first); err == nil {
		t.Fatal("the first stream did not end")
	}
	xdstest.Eventually(t, "a stream opened once another ended", func() bool {
		s, err := openEcho(t, ctx, xdstest.MustDial(t, addr))
		if s != nil {
			s.CloseSend()
		}
		return err == nil
	})
}

func TestMaxStreamsPerConnection(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.StartRawUpstream(t, echoReversed(&digestLog{}))
	srv, addr := startTap(t, tap.Config{Upstream: up.Addr, MaxStreamsPerConnection: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc := xdstest.MustDial(t, addr)
	if _, err := openEcho(t, ctx, cc); err != nil {
		t.Fatal(err)
	}
	_, err := openEcho(t, ctx, cc)
	wantRefused(t, err, "--max-streams-per-connection")
	if got := srv.Refused().StreamsOnConnection; got != 1 {
		t.Errorf("Refused().StreamsOnConnection = %d, want 1", got)
	}
	if _, err := openEcho(t, ctx, xdstest.MustDial(t, addr)); err != nil {
		t.Errorf("a stream on another connection: %v", err)
	}
}

// TestMaxPendingConnections: clients that connect and say nothing hold the
// guard's places; past them new connections are closed at once and counted,
// and once the silent ones go, gRPC clients are served again.
func TestMaxPendingConnections(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.StartRawUpstream(t, echoReversed(&digestLog{}))
	srv, addr := startTap(t, tap.Config{Upstream: up.Addr, MaxPendingConnections: 2}, nil)
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr.Addr)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	// Until the guard holds both, a third connection may still get in; once
	// it holds both, the next is closed unread.
	xdstest.Eventually(t, "a connection refused while two wait in the guard", func() bool {
		c, err := net.Dial("tcp", addr.Addr)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err = c.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) && srv.Refused().Connections > 0
	})
	for _, c := range silent {
		c.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	xdstest.Eventually(t, "a client served once the silent connections went", func() bool {
		s, err := openEcho(t, ctx, xdstest.MustDial(t, addr))
		if s != nil {
			s.CloseSend()
		}
		return err == nil
	})
}
