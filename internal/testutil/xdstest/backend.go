package xdstest

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

type backend struct {
	testgrpc.UnimplementedTestServiceServer
	addr string
}

func (*backend) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// UnaryCall answers with the backend's address as hostname so a test with
// several backends can tell which one the xDS client picked.
func (b *backend) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{
		Payload:  &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())},
		Hostname: b.addr,
		ServerId: b.addr,
	}, nil
}

// StartBackend serves grpc.testing.TestService (EmptyCall, UnaryCall) on
// 127.0.0.1 and returns its host:port, the data-plane target the xDS
// resources point clients at.
func StartBackend(t testing.TB) string {
	t.Helper()
	lis := ListenTCP(t)
	srv := grpc.NewServer(grpc.WaitForHandlers(true))
	testgrpc.RegisterTestServiceServer(srv, &backend{addr: lis.Addr().String()})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}
