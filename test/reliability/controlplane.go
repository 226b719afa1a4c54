package reliability

import (
	"context"
	"net"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
)

// ControlPlane is go-control-plane's ADS server over its snapshot cache, as
// internal/testutil/xdstest starts it, but keeping nothing of what it receives:
// xdstest.ControlPlane records every request, which in a loop of thousands
// of NACKs a second is memory the tests here would then blame on the tap.
type ControlPlane struct {
	Addr  string
	Cache cache.SnapshotCache

	srv    *grpc.Server
	cancel context.CancelFunc
	served chan struct{}
	once   sync.Once
}

// StartControlPlane serves ADS on lis; callbacks may be nil. It stops at cleanup.
func StartControlPlane(t testing.TB, lis net.Listener, callbacks server.Callbacks) *ControlPlane {
	t.Helper()
	if callbacks == nil {
		callbacks = server.CallbackFuncs{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cp := &ControlPlane{
		Addr:   lis.Addr().String(),
		Cache:  cache.NewSnapshotCache(true, cache.IDHash{}, nil),
		srv:    grpc.NewServer(grpc.WaitForHandlers(true)),
		cancel: cancel,
		served: make(chan struct{}),
	}
	discovery.RegisterAggregatedDiscoveryServiceServer(cp.srv, server.NewServer(ctx, cp.Cache, callbacks))
	go func() {
		defer close(cp.served)
		cp.srv.Serve(lis)
	}()
	t.Cleanup(cp.Stop)
	return cp
}

// Stop ends every stream at once (the client sees Unavailable) and closes the listener.
func (cp *ControlPlane) Stop() {
	cp.once.Do(func() {
		cp.srv.Stop()
		<-cp.served
		cp.cancel()
	})
}

// SetSnapshot publishes resources under version to every node of nodeIDs.
func (cp *ControlPlane) SetSnapshot(t testing.TB, version string, resources map[resource.Type][]types.Resource, nodeIDs ...string) {
	t.Helper()
	snap, err := cache.NewSnapshot(version, resources)
	if err != nil {
		t.Fatalf("reliability: snapshot %s: %v", version, err)
	}
	for _, id := range nodeIDs {
		if err := cp.Cache.SetSnapshot(context.Background(), id, snap); err != nil {
			t.Fatalf("reliability: set snapshot %s for %q: %v", version, id, err)
		}
	}
}
