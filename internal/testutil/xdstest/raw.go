package xdstest

import (
	"context"
	"crypto/sha256"
	"math"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// DialRaw creates a ClientConn to target, closed at cleanup. It is insecure
// unless opts carry other transport credentials (later options win), and it
// accepts messages up to MaxInt32 bytes like istio-agent does, because real
// CDS/EDS responses exceed gRPC's 4 MiB default. For xds:/// targets pass
// grpc.WithResolvers(XDSResolver(...)).
func DialRaw(t testing.TB, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
	}, opts...)
	cc, err := grpc.NewClient(target, all...)
	if err != nil {
		t.Fatalf("xdstest: dial %s: %v", target, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// OpenSotW opens an ADS StreamAggregatedResources stream. The stream is
// cancelled at cleanup; ctx may carry outgoing metadata or an earlier
// cancellation.
func OpenSotW(t testing.TB, ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	return openADS(t, ctx, cc, "SotW", discovery.AggregatedDiscoveryServiceClient.StreamAggregatedResources, opts)
}

// OpenDelta opens an ADS DeltaAggregatedResources stream, cancelled at
// cleanup.
func OpenDelta(t testing.TB, ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesClient {
	t.Helper()
	return openADS(t, ctx, cc, "Delta", discovery.AggregatedDiscoveryServiceClient.DeltaAggregatedResources, opts)
}

// openADS opens one of ADS's two streams with open, cancelled at cleanup.
func openADS[S any](t testing.TB, ctx context.Context, cc grpc.ClientConnInterface, kind string, open func(discovery.AggregatedDiscoveryServiceClient, context.Context, ...grpc.CallOption) (S, error), opts []grpc.CallOption) S {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	s, err := open(discovery.NewAggregatedDiscoveryServiceClient(cc), ctx, opts...)
	if err != nil {
		t.Fatalf("xdstest: open %s ADS stream: %v", kind, err)
	}
	return s
}

// RecvWithin calls recv (a stream's Recv method) and fails the test if it
// errors or takes longer than d. On timeout the Recv keeps running until the
// stream is cancelled at cleanup.
func RecvWithin[T any](t testing.TB, d time.Duration, recv func() (T, error)) T {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := recv()
		ch <- result{v, err}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("xdstest: recv: %v", r.err)
		}
		return r.v
	case <-timer.C:
		t.Fatalf("xdstest: nothing received within %v", d)
		var zero T
		return zero
	}
}

// MessageHash is the sha256 of m's deterministic encoding, so the same
// message built or decoded on both sides of the tap hashes the same despite
// map ordering. It is not a canonical form across protobuf-go versions:
// compare hashes computed in one test binary only.
func MessageHash(m proto.Message) [32]byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic("xdstest: marshal for hash: " + err.Error())
	}
	return sha256.Sum256(b)
}
