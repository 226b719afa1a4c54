package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/structpb"

	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pilot/test/xdstest"
	"istio.io/istio/pkg/adsc"
)

// Namespace is the namespace of the harness's proxies.
const Namespace = "default"

// NodeID is the node id istio's ADS clients send for a sidecar named
// workload at ip: sidecar~IP~WORKLOAD.default~default.svc.cluster.local.
func NodeID(workload, ip string) string {
	return fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", ip, workload, Namespace, Namespace)
}

// ProxyID is what istiod calls the proxy of workload: WORKLOAD.default, the
// Proxy of EnginePush and the keys of Engine.Connections.
func ProxyID(workload string) string { return workload + "." + Namespace }

// Meta is node metadata a client sends besides NAMESPACE and CLUSTER_ID,
// e.g. {"DNS_CAPTURE": "true"} as a sidecar whose agent proxies DNS.
type Meta map[string]string

func clientConfig(workload, ip string, extra []Meta) adsc.Config {
	fields := map[string]*structpb.Value{
		"NAMESPACE":  structpb.NewStringValue(Namespace),
		"CLUSTER_ID": structpb.NewStringValue(ClusterID),
	}
	for _, m := range extra {
		for k, v := range m {
			fields[k] = structpb.NewStringValue(v)
		}
	}
	return adsc.Config{Namespace: Namespace, Workload: workload, IP: ip, Meta: &structpb.Struct{Fields: fields}}
}

// SotW connects istio's SotW ADS client (pkg/adsc) to addr as the sidecar
// workload at ip, and waits until it has clusters and listeners. Like Envoy
// it asks for CDS and LDS; on each CDS and LDS response it asks for the
// EDS and RDS they name. It reconnects when its stream ends, and closes when
// the test ends.
func SotW(t *testing.T, addr, workload, ip string, meta ...Meta) *adsc.ADSC {
	t.Helper()
	c, err := adsc.New(addr, &adsc.ADSConfig{
		Config: clientConfig(workload, ip, meta),
		InitialDiscoveryRequests: []*discovery.DiscoveryRequest{
			{TypeUrl: v3.ClusterType}, {TypeUrl: v3.ListenerType},
		},
	})
	if err != nil {
		t.Fatalf("adsc %s: %v", workload, err)
	}
	t.Cleanup(c.Close)
	if err := c.Run(); err != nil {
		t.Fatalf("adsc %s: %v", workload, err)
	}
	if _, err := c.Wait(10*time.Second, v3.ClusterType, v3.ListenerType); err != nil {
		t.Fatalf("adsc %s: no initial configuration: %v", workload, err)
	}
	return c
}

// ClusterCheck judges a cluster a Delta client received: an error NACKs
// the response (adsc HandlerContext.Reject), with the error as its message.
type ClusterCheck func(*cluster.Cluster) error

// Checks judge what a Delta client receives, each as ClusterCheck does; a
// nil check accepts everything.
type Checks struct {
	Cluster ClusterCheck
	Route   func(*route.RouteConfiguration) error
}

// Delta connects istio's Delta ADS client (pkg/adsc NewDelta) to addr as
// the sidecar workload at ip, and waits for its initial watches. Like Envoy
// it subscribes to every cluster and listener, and to the endpoints and
// routes they name. check, if not nil, judges every cluster received: a
// rejected one is NACKed. It reconnects when its stream ends, and stops
// when the test ends.
func Delta(t *testing.T, addr, workload, ip string, check ClusterCheck, meta ...Meta) *adsc.Client {
	t.Helper()
	return DeltaChecked(t, addr, workload, ip, Checks{Cluster: check}, meta...)
}

// DeltaChecked is Delta judging route configurations too.
func DeltaChecked(t *testing.T, addr, workload, ip string, checks Checks, meta ...Meta) *adsc.Client {
	t.Helper()
	check := checks.Cluster
	c := adsc.NewDelta(addr, &adsc.DeltaADSConfig{Config: clientConfig(workload, ip, meta)},
		adsc.Register(func(ctx adsc.HandlerContext, _, _ string, c *cluster.Cluster, ev adsc.Event) {
			if ev == adsc.EventDelete || c == nil {
				return
			}
			if check != nil {
				if err := check(c); err != nil {
					ctx.Reject(err)
					return
				}
			}
			ctx.RegisterDependency(v3.EndpointType, xdstest.ExtractEdsClusterNames([]*cluster.Cluster{c})...)
		}),
		adsc.Watch[*cluster.Cluster]("*"),
		adsc.Register(func(ctx adsc.HandlerContext, _, _ string, l *listener.Listener, ev adsc.Event) {
			if ev == adsc.EventDelete || l == nil {
				return
			}
			ctx.RegisterDependency(v3.RouteType, xdstest.ExtractRoutesFromListeners([]*listener.Listener{l})...)
		}),
		adsc.Watch[*listener.Listener]("*"),
		// Endpoints and routes need a handler to be taken (and ACKed) as known types.
		adsc.Register(func(adsc.HandlerContext, string, string, *endpoint.ClusterLoadAssignment, adsc.Event) {}),
		adsc.Register(func(ctx adsc.HandlerContext, _, _ string, rc *route.RouteConfiguration, ev adsc.Event) {
			if ev == adsc.EventDelete || rc == nil || checks.Route == nil {
				return
			}
			if err := checks.Route(rc); err != nil {
				ctx.Reject(err)
			}
		}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		c.Close()
		<-done
	})
	select {
	case <-c.Synced():
	case <-time.After(10 * time.Second):
		t.Fatalf("delta adsc %s: no initial configuration within 10s", workload)
	}
	return c
}
