package tap_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// answerEach is an upstream that answers every request frame with
// reply(request), until the client half-closes.
func answerEach(reply func(req []byte) []byte) grpc.StreamHandler {
	return func(_ any, s grpc.ServerStream) error {
		for {
			b, err := xdstest.Recv(s)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := xdstest.Send(s, reply(b)); err != nil {
				return err
			}
		}
	}
}

// echoReversed answers every request frame with its bytes reversed, so both
// directions carry distinct bytes, and logs what it received in got.
func echoReversed(got *digestLog) grpc.StreamHandler {
	return answerEach(func(b []byte) []byte {
		got.add(b)
		r := make([]byte, len(b))
		for i := range b {
			r[len(b)-1-i] = b[i]
		}
		return r
	})
}

func TestRelayIsByteExactBothWays(t *testing.T) {
	leakcheck.Check(t)
	var atUpstream digestLog
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&atUpstream))
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)

	rng := rand.New(rand.NewPCG(1, 2))
	var sent, wantBack digestLog
	const n = 300
	go func() {
		for i := 0; i < n; i++ {
			// Not protobuf at all, empty frames and frames larger than gRPC's
			// read buffers: the relay must not care.
			size := rng.IntN(64 << 10)
			if i%50 == 0 {
				size = 0
			}
			b := make([]byte, size)
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			r := make([]byte, size)
			for j := range b {
				r[size-1-j] = b[j]
			}
			sent.add(b)
			wantBack.add(r)
			if err := xdstest.Send(s, b); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
		s.CloseSend()
	}()
	var gotBack digestLog
	for {
		b, err := xdstest.Recv(s)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("recv after %d frames: %v", len(gotBack.get()), err)
		}
		gotBack.add(b)
	}
	if diff := cmp.Diff(sent.get(), atUpstream.get()); diff != "" {
		t.Errorf("request frames at the upstream differ from those sent (-sent +upstream):\n%s", diff)
	}
	if diff := cmp.Diff(wantBack.get(), gotBack.get()); diff != "" {
		t.Errorf("response frames at the client differ from those the upstream sent (-upstream +client):\n%s", diff)
	}
	if len(gotBack.get()) != n {
		t.Errorf("client received %d frames, want %d", len(gotBack.get()), n)
	}
}

func TestRelayPassesHeadersTrailersAndStatus(t *testing.T) {
	leakcheck.Check(t)
	detail := &errdetails.ErrorInfo{Reason: "QUOTA", Domain: "xds.test"}
	wantStatus, _ := status.New(codes.PermissionDenied, "no config for you").WithDetails(detail)

	gotHeader := make(chan metadata.MD, 1)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(s.Context())
		gotHeader <- md
		if _, err := xdstest.Recv(s); err != nil {
			return err
		}
		s.SendHeader(metadata.Pairs("x-istiod-revision", "default", "x-bin", "b"))
		if err := xdstest.Send(s, []byte("config")); err != nil {
			return err
		}
		s.SetTrailer(metadata.Pairs("x-trailer", "t1", "x-trailer", "t2"))
		return wantStatus.Err()
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr, grpc.WithUserAgent("envoy/1.36.0"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx,
		"authorization", "Bearer eyJhbGciOiJSUzI1NiJ9.test",
		"ClusterID", "Kubernetes",
		"x-custom", "a", "x-custom", "b")
	var header, trailer metadata.MD
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod, grpc.Header(&header), grpc.Trailer(&trailer))
	if err := xdstest.Send(s, []byte("hello")); err != nil {
		t.Fatalf("send: %v", err)
	}
	b, err := xdstest.Recv(s)
	if err != nil || string(b) != "config" {
		t.Fatalf("recv = %q, %v; want \"config\"", b, err)
	}
	_, err = xdstest.Recv(s)
	got := status.Convert(err)
	if diff := cmp.Diff(wantStatus.Proto(), got.Proto(), protocmp.Transform()); diff != "" {
		t.Errorf("status (-upstream +client):\n%s", diff)
	}

	md := <-gotHeader
	for k, want := range map[string][]string{
		"authorization": {"Bearer eyJhbGciOiJSUzI1NiJ9.test"},
		"clusterid":     {"Kubernetes"},
		"x-custom":      {"a", "b"},
	} {
		if diff := cmp.Diff(want, md.Get(k)); diff != "" {
			t.Errorf("upstream request header %q (-want +got):\n%s", k, diff)
		}
	}
	if ua := strings.Join(md.Get("user-agent"), ""); !strings.HasPrefix(ua, "envoy/1.36.0") {
		t.Errorf("upstream user-agent = %q, want the client's envoy/1.36.0 first", ua)
	}
	if diff := cmp.Diff([]string{"default"}, header.Get("x-istiod-revision")); diff != "" {
		t.Errorf("response header (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"t1", "t2"}, trailer.Get("x-trailer")); diff != "" {
		t.Errorf("trailer (-want +got):\n%s", diff)
	}
}

func TestRelayPassesHeadersWhenUpstreamFailsBeforeFirstMessage(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		s.SendHeader(metadata.Pairs("x-seen", "yes"))
		return status.Error(codes.FailedPrecondition, "node not ready")
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	_, err := xdstest.Recv(s)
	if got := status.Convert(err); got.Code() != codes.FailedPrecondition || got.Message() != "node not ready" {
		t.Errorf("status = %v, want FailedPrecondition \"node not ready\"", got)
	}
	h, err := s.Header()
	if err != nil {
		t.Fatalf("Header: %v", err)
	}
	if diff := cmp.Diff([]string{"yes"}, h.Get("x-seen")); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
}

func TestRelayPassesTrailersOnlyStatus(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		s.SetTrailer(metadata.Pairs("x-why", "unknown-node"))
		return status.Error(codes.Unauthenticated, "bad token")
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var trailer metadata.MD
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod, grpc.Trailer(&trailer))
	_, err := xdstest.Recv(s)
	if got := status.Convert(err); got.Code() != codes.Unauthenticated || got.Message() != "bad token" {
		t.Errorf("status = %v, want Unauthenticated \"bad token\"", got)
	}
	if diff := cmp.Diff([]string{"unknown-node"}, trailer.Get("x-why")); diff != "" {
		t.Errorf("trailer (-want +got):\n%s", diff)
	}
}

func TestRelayPropagatesHalfCloseBothWays(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		var n int
		for {
			_, err := xdstest.Recv(s)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			n++
		}
		// The client said it is done; answer after that, then end.
		for i := 0; i < n; i++ {
			if err := xdstest.Send(s, []byte{byte(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	for i := 0; i < 3; i++ {
		if err := xdstest.Send(s, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		b, err := xdstest.Recv(s)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		got = append(got, b...)
	}
	if !bytes.Equal(got, []byte{0, 1, 2}) {
		t.Errorf("after half-close got %v, want [0 1 2] then OK", got)
	}
}

func TestRelayPropagatesCancellationUpstream(t *testing.T) {
	leakcheck.Check(t)
	upstreamDone := make(chan error, 1)
	upstreamGot := make(chan struct{})
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		xdstest.Recv(s)
		close(upstreamGot)
		<-s.Context().Done()
		upstreamDone <- s.Context().Err()
		return nil
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	if err := xdstest.Send(s, []byte("x")); err != nil {
		t.Fatal(err)
	}
	<-upstreamGot
	cancel()
	select {
	case err := <-upstreamDone:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("upstream stream ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream stream was not cancelled after the client cancelled")
	}
}
