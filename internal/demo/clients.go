package demo

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/internal/xdsconfig"
)

// StartBackend serves gRPC health checks, the greeter service's one endpoint.
func StartBackend() (addr string, stop func(), err error) {
	lis, err := Listen()
	if err != nil {
		return "", nil, err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	return lis.Addr().String(), srv.Stop, nil
}

// RunProxyless is a proxyless gRPC client: grpc-go's own xDS client resolves
// xds:///greeter through the tap (SotW ADS) and calls the backend every few
// seconds, as an application would.
func RunProxyless(ctx context.Context, tapAddr string, log *slog.Logger) error {
	bootstrap, err := xdsconfig.BootstrapJSON(tapAddr, ProxylessNode, "greeter-client")
	if err != nil {
		return err
	}
	// grpc-go reads GRPC_XDS_BOOTSTRAP_CONFIG when the process starts, too
	// early for a bootstrap that names a tap on a random port; this resolver
	// takes it directly.
	xdsResolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		return fmt.Errorf("demo: proxyless client: %w", err)
	}
	cc, err := grpc.NewClient("xds:///"+Service, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(xdsResolver))
	if err != nil {
		return fmt.Errorf("demo: proxyless client: %w", err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.Check(callCtx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Debug("demo: greeter call failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// RunDelta is an Envoy-like Delta ADS client: it subscribes to every cluster
// and listener, then to the endpoints and routes they name, and ACKs or NACKs
// each push after checking it, as Envoy does. It rejects clusters with
// lb_policy MAGLEV, like grpc-go, so the demo's bad cluster is NACKed on both
// protocols.
func RunDelta(ctx context.Context, tapAddr string, log *slog.Logger) error {
	for ctx.Err() == nil {
		err := runDeltaStream(ctx, tapAddr)
		if ctx.Err() != nil {
			return nil
		}
		log.Debug("demo: delta client reconnecting", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func runDeltaStream(ctx context.Context, tapAddr string) error {
	cc, err := grpc.NewClient(tapAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	// istio-agent adds ISTIO_VERSION to the metadata of every sidecar's node.
	meta := &structpb.Struct{Fields: map[string]*structpb.Value{"ISTIO_VERSION": structpb.NewStringValue("1.28.1")}}
	node := &core.Node{Id: DeltaNode, Cluster: "productpage", UserAgentName: "envoy", Metadata: meta,
		UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.36.2"}}
	// Envoy opens with wildcard CDS and LDS, the node on the first request only.
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		return err
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ListenerType}); err != nil {
		return err
	}
	subscribed := map[string][]string{}
	for {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		want, rejection := check(resp)
		for typ, names := range want {
			var fresh []string
			for _, n := range names {
				if !slices.Contains(subscribed[typ], n) {
					fresh = append(fresh, n)
				}
			}
			if len(fresh) > 0 {
				subscribed[typ] = append(subscribed[typ], fresh...)
				if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: typ, ResourceNamesSubscribe: fresh}); err != nil {
					return err
				}
			}
		}
		answer := &discovery.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}
		if rejection != "" {
			answer.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: rejection}
		}
		if err := s.Send(answer); err != nil {
			return err
		}
	}
}

// check validates a push and says which dependent resources it names.
func check(resp *discovery.DeltaDiscoveryResponse) (want map[string][]string, rejection string) {
	want = map[string][]string{}
	for _, r := range resp.Resources {
		switch resp.TypeUrl {
		case resource.ClusterType:
			var c clusterv3.Cluster
			if err := r.GetResource().UnmarshalTo(&c); err != nil {
				return nil, fmt.Sprintf("cluster %s: %v", r.Name, err)
			}
			if c.LbPolicy == clusterv3.Cluster_MAGLEV {
				return nil, fmt.Sprintf("Error adding/updating cluster(s) %s: unexpected lbPolicy MAGLEV", c.Name)
			}
			if c.GetType() == clusterv3.Cluster_EDS {
				want[resource.EndpointType] = append(want[resource.EndpointType], c.Name)
			}
		case resource.ListenerType:
			var l listenerv3.Listener
			if err := r.GetResource().UnmarshalTo(&l); err != nil {
				return nil, fmt.Sprintf("listener %s: %v", r.Name, err)
			}
			var hcm hcmv3.HttpConnectionManager
			if l.GetApiListener().GetApiListener().UnmarshalTo(&hcm) == nil {
				if rds := hcm.GetRds(); rds != nil {
					want[resource.RouteType] = append(want[resource.RouteType], rds.RouteConfigName)
				}
			}
		}
	}
	return want, ""
}
