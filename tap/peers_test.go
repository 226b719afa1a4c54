package tap_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

func TestEachDownstreamConnectionGetsItsOwnUpstreamConnection(t *testing.T) {
	leakcheck.Check(t)
	var mu sync.Mutex
	peers := map[string]int{}
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		p, _ := peer.FromContext(s.Context())
		mu.Lock()
		peers[p.Addr.String()]++
		mu.Unlock()
		if _, err := xdstest.Recv(s); err != nil {
			return err
		}
		return xdstest.Send(s, []byte("ok"))
	})
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for c := 0; c < 2; c++ {
		cc := xdstest.MustDial(t, addr)
		for i := 0; i < 3; i++ {
			s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
			if err := xdstest.Send(s, []byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := xdstest.Recv(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(peers) != 2 {
		t.Fatalf("upstream saw streams from %d connections %v, want 2 (one per client connection)", len(peers), peers)
	}
	for p, n := range peers {
		if n != 3 {
			t.Errorf("upstream connection %s carried %d streams, want the 3 of its client connection", p, n)
		}
	}
}

func TestUnixSocketsOnBothSides(t *testing.T) {
	leakcheck.Check(t)
	upLis, _ := xdstest.ListenUnix(t)
	up := xdstest.ServeRawUpstream(t, upLis, echoReversed(&digestLog{}))
	tapLis, _ := xdstest.ListenUnix(t)
	_, addr := startTap(t, tap.Config{Upstream: up.Addr}, tapLis)
	if addr.Network != "unix" || up.Addr.Network != "unix" {
		t.Fatalf("want unix sockets, got tap %v upstream %v", addr, up.Addr)
	}
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	if err := xdstest.Send(s, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if b, err := xdstest.Recv(s); err != nil || string(b) != "cba" {
		t.Fatalf("recv = %q, %v; want \"cba\"", b, err)
	}
}

// testService is a non-xDS service: the tap must relay it as opaque bytes.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (testService) UnaryCall(_ context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if in.GetResponseStatus().GetCode() != 0 {
		return nil, status.Error(codes.Code(in.GetResponseStatus().GetCode()), in.GetResponseStatus().GetMessage())
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: in.GetPayload().GetBody()}, Username: "opaque"}, nil
}

func (testService) StreamingOutputCall(in *testgrpc.StreamingOutputCallRequest, s testgrpc.TestService_StreamingOutputCallServer) error {
	for _, p := range in.GetResponseParameters() {
		if err := s.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	return nil
}

func (testService) StreamingInputCall(s testgrpc.TestService_StreamingInputCallServer) error {
	var total int32
	for {
		in, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: total})
		}
		if err != nil {
			return err
		}
		total += int32(len(in.GetPayload().GetBody()))
	}
}

func TestOpaqueUnaryAndStreamingMethodsPassThrough(t *testing.T) {
	leakcheck.Check(t)
	lis := xdstest.ListenTCP(t)
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, testService{})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	_, addr := startTap(t, tap.Config{Upstream: xdstest.AddressOf(lis)}, nil)
	client := testgrpc.NewTestServiceClient(xdstest.MustDial(t, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("csr")}})
	if err != nil || string(resp.GetPayload().GetBody()) != "csr" || resp.GetUsername() != "opaque" {
		t.Errorf("UnaryCall = %v, %v; want the payload echoed", resp, err)
	}
	_, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.NotFound), Message: "no such cert"}})
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "no such cert" {
		t.Errorf("UnaryCall error = %v, want NotFound \"no such cert\"", st)
	}

	out, err := client.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{
		ResponseParameters: []*testgrpc.ResponseParameters{{Size: 1}, {Size: 1000}, {Size: 100000}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for {
		m, err := out.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("StreamingOutputCall: %v", err)
		}
		sizes = append(sizes, len(m.GetPayload().GetBody()))
	}
	if len(sizes) != 3 || sizes[0] != 1 || sizes[1] != 1000 || sizes[2] != 100000 {
		t.Errorf("server-streaming sizes = %v, want [1 1000 100000]", sizes)
	}

	in, err := client.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		in.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, 10)}})
	}
	sum, err := in.CloseAndRecv()
	if err != nil || sum.GetAggregatedPayloadSize() != 40 {
		t.Errorf("client-streaming = %v, %v; want 40", sum, err)
	}
}

func TestTLSOnEachLeg(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	dir := t.TempDir()
	caFile := xdstest.WriteFiles(t, dir, "ca.pem", ca.CertPEM())
	istiod := ca.Issue(t, "istiod", []string{"istiod.istio-system.svc"}, nil, false)
	tapCert := ca.Issue(t, "adstap", []string{"adstap.local"}, []net.IP{net.ParseIP("127.0.0.1")}, false)
	tapCertFile, tapKeyFile := tapCert.WriteFiles(t, dir, "tap")
	client := ca.Issue(t, "envoy", nil, nil, true)
	tapClient := ca.Issue(t, "adstap-client", nil, nil, true)
	tapClientCert, tapClientKey := tapClient.WriteFiles(t, dir, "tap-client")

	// The upstream is istiod-like: TLS with a SAN that is not the dialled
	// address, and it demands a client certificate.
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&digestLog{}), grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{istiod.TLSCertificate()},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})))

	listenTLS, err := tap.ListenTLSConfig(tapCertFile, tapKeyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	upstreamTLS, err := tap.UpstreamTLSConfig(caFile, "istiod.istio-system.svc", tapClientCert, tapClientKey)
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startTap(t, tap.Config{Upstream: up.Addr, ListenTLS: listenTLS, UpstreamTLS: upstreamTLS}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roundTrip := func(cc *grpc.ClientConn) error {
		s, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, xdstest.ADSMethod, grpc.ForceCodecV2(codec.Passthrough{}))
		if err != nil {
			return err
		}
		if err := xdstest.Send(s, []byte("tls")); err != nil {
			return err
		}
		b, err := xdstest.Recv(s)
		if err == nil && string(b) != "slt" {
			t.Errorf("got %q through TLS, want \"slt\"", b)
		}
		return err
	}

	t.Run("mTLS client is relayed", func(t *testing.T) {
		cc := xdstest.MustDial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.Pool(), ServerName: "adstap.local", Certificates: []tls.Certificate{client.TLSCertificate()},
		})))
		if err := roundTrip(cc); err != nil {
			t.Fatalf("round trip over mTLS both legs: %v", err)
		}
	})
	t.Run("client without a certificate is refused", func(t *testing.T) {
		cc := xdstest.MustDial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: ca.Pool(), ServerName: "adstap.local",
		})))
		if err := roundTrip(cc); status.Code(err) != codes.Unavailable {
			t.Fatalf("without a client certificate: %v, want Unavailable from the failed handshake", err)
		}
	})
	t.Run("upstream with the wrong name is refused", func(t *testing.T) {
		wrongName, err := tap.UpstreamTLSConfig(caFile, "not-istiod.example", tapClientCert, tapClientKey)
		if err != nil {
			t.Fatal(err)
		}
		_, addr := startTap(t, tap.Config{Upstream: up.Addr, UpstreamTLS: wrongName}, nil)
		err = roundTrip(xdstest.MustDial(t, addr))
		if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "not-istiod.example") {
			t.Fatalf("upstream name mismatch: %v, want Unavailable naming the expected server name", err)
		}
	})
}
