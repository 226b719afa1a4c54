// Package controlplane serves go-control-plane's xDS server over its snapshot cache on a listener: the control plane of `adstap demo` and, through internal/testutil/xdstest, of the tests.
package controlplane

import (
	"context"
	"fmt"
	"net"
	"sync"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
)

// Config says how to serve.
type Config struct {
	// Callbacks are told every stream event; nil tells nothing.
	Callbacks server.Callbacks
	// Log receives the cache's messages; nil is go-control-plane's default.
	Log log.Logger
	// ServerOptions are grpc.NewServer's.
	ServerOptions []grpc.ServerOption
	// PerType serves the per-type LDS/RDS/CDS/EDS/SDS services beside ADS.
	PerType bool
	// ServeFailed, when set, is told why serving stopped if the listener
	// broke (not after Stop).
	ServeFailed func(error)
}

// ControlPlane is go-control-plane's server, SotW and Delta, over an ADS
// snapshot cache.
type ControlPlane struct {
	lis    net.Listener
	srv    *grpc.Server
	cache  cache.SnapshotCache
	cancel context.CancelFunc
	served chan struct{}
	once   sync.Once
}

// Start serves on lis until Stop or until ctx ends.
func Start(ctx context.Context, lis net.Listener, cfg Config) *ControlPlane {
	if cfg.Callbacks == nil {
		cfg.Callbacks = server.CallbackFuncs{}
	}
	ctx, cancel := context.WithCancel(ctx)
	cp := &ControlPlane{
		lis:    lis,
		srv:    grpc.NewServer(cfg.ServerOptions...),
		cache:  cache.NewSnapshotCache(true, cache.IDHash{}, cfg.Log),
		cancel: cancel,
		served: make(chan struct{}),
	}
	xds := server.NewServer(ctx, cp.cache, cfg.Callbacks)
	discovery.RegisterAggregatedDiscoveryServiceServer(cp.srv, xds)
	if cfg.PerType {
		listenerservice.RegisterListenerDiscoveryServiceServer(cp.srv, xds)
		routeservice.RegisterRouteDiscoveryServiceServer(cp.srv, xds)
		clusterservice.RegisterClusterDiscoveryServiceServer(cp.srv, xds)
		endpointservice.RegisterEndpointDiscoveryServiceServer(cp.srv, xds)
		secretservice.RegisterSecretDiscoveryServiceServer(cp.srv, xds)
	}
	go func() {
		defer close(cp.served)
		// Serve returns nil after Stop and an error if the listener broke;
		// either way the clients learn about it through their own RPCs.
		if err := cp.srv.Serve(lis); err != nil && cfg.ServeFailed != nil {
			cfg.ServeFailed(err)
		}
	}()
	return cp
}

// Stop ends every stream at once (clients see Unavailable) and closes the
// listener. Safe to call repeatedly.
func (cp *ControlPlane) Stop() {
	cp.once.Do(func() {
		cp.srv.Stop()
		<-cp.served
		cp.cancel()
	})
}

// Addr is the listener's address: host:port, or a Unix socket's path.
func (cp *ControlPlane) Addr() string { return cp.lis.Addr().String() }

// Cache is the snapshot cache, for more than Set: ClearSnapshot, per-node
// status.
func (cp *ControlPlane) Cache() cache.SnapshotCache { return cp.cache }

// Set publishes resources under version to every node of nodes. Streams
// already open get it pushed; resources of types not in the map are
// removed. The snapshot is not checked for consistency, so that partial or
// dangling sets can be sent on purpose.
func (cp *ControlPlane) Set(version string, resources map[resource.Type][]types.Resource, nodes ...string) error {
	snap, err := cache.NewSnapshot(version, resources)
	if err != nil {
		return fmt.Errorf("building snapshot %s: %w", version, err)
	}
	for _, n := range nodes {
		if err := cp.cache.SetSnapshot(context.Background(), n, snap); err != nil {
			return fmt.Errorf("setting snapshot %s for %s: %w", version, n, err)
		}
	}
	return nil
}
