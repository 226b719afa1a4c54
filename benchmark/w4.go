package benchmark

import (
	"context"
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
)

// w4 is Delta xDS with a large state and small changes: the client
// subscribes to N EDS resources, receives them all, then receives pushes
// that each update 1 % of them (a rolling window over the names), and ACKs
// every push.
type w4 struct {
	resources, churn int
	pushSequence
}

// newW4 builds W4's pushes.
func newW4(s Sizes) *w4 {
	w := &w4{resources: s.W4Resources, churn: s.W4Churn, pushSequence: pushSequence{
		method:    methodDelta,
		warmUp:    "the initial state", // not measured
		expectACK: expectDeltaACK,
	}}
	w.checkInitial = w.checkInitialRequest
	n := 1
	for proto.Size(endpoints(clusterName(0), n+1, 0)) <= s.W4Size {
		n++
	}
	names := make([]string, s.W4Resources)
	for i := range names {
		names[i] = clusterName(i)
	}
	w.initial = mustMarshal(&discovery.DeltaDiscoveryRequest{Node: node(0), TypeUrl: codec.TypeEndpoint, ResourceNamesSubscribe: names})
	resource := func(i, version int) *discovery.Resource {
		return &discovery.Resource{
			Name:     names[i],
			Version:  fmt.Sprintf("%d", version),
			Resource: mustAny(endpoints(names[i], n, version*s.W4Resources+i)),
		}
	}
	for k := 0; k <= s.W4Pushes; k++ {
		resp := &discovery.DeltaDiscoveryResponse{
			SystemVersionInfo: pushVersion("w4", k),
			TypeUrl:           codec.TypeEndpoint,
			Nonce:             pushNonce("w4", k),
			ControlPlane:      &core.ControlPlane{Identifier: controlPlaneID},
		}
		if k == 0 {
			for i := range names {
				resp.Resources = append(resp.Resources, resource(i, 0))
			}
		} else {
			for x := range s.W4Churn {
				resp.Resources = append(resp.Resources, resource(((k-1)*s.W4Churn+x)%s.W4Resources, k))
			}
		}
		w.pushes = append(w.pushes, newMsg(mustMarshal(resp)))
		w.nonces = append(w.nonces, resp.Nonce)
		w.acks = append(w.acks, mustMarshal(&discovery.DeltaDiscoveryRequest{TypeUrl: codec.TypeEndpoint, ResponseNonce: resp.Nonce}))
	}
	return w
}

func (*w4) ID() string { return "W4" }

func (w *w4) Describe() string {
	return fmt.Sprintf("Delta EDS: %d resources (%s), then %d pushes of %d changed (%s each), ACKed",
		w.resources, sizeMB(w.pushes[0].Len), len(w.pushes)-1, w.churn, sizeKB(w.pushes[1].Len))
}

func (w *w4) Run(ctx context.Context, start StartMiddle) (Result, error) { return w.run(ctx, start) }

// checkInitialRequest wants the client's Delta EDS subscription to every
// resource.
func (w *w4) checkInitialRequest(s msgStream) error {
	var req discovery.DeltaDiscoveryRequest
	if err := recvRequest(s, &req); err != nil {
		return err
	}
	if req.TypeUrl != codec.TypeEndpoint || len(req.ResourceNamesSubscribe) != w.resources {
		return fmt.Errorf("first request for %q subscribes %d names, want %d", req.TypeUrl, len(req.ResourceNamesSubscribe), w.resources)
	}
	return nil
}

func sizeKB(n int) string { return fmt.Sprintf("%.0f KB", float64(n)/1e3) }
