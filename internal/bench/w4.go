package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
)

// W4 is Delta xDS with a large state and small changes: the client
// subscribes to N EDS resources, receives them all, then receives pushes
// that each update 1 % of them (a rolling window over the names), and ACKs
// every push.
type W4 struct {
	resources, churn int
	initial          []byte
	pushes           []Msg // [0] is the initial state, not measured
	nonces           []string
	acks             [][]byte
}

// NewW4 builds W4's pushes.
func NewW4(s Sizes) *W4 {
	w := &W4{resources: s.W4Resources, churn: s.W4Churn}
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

func (*W4) ID() string { return "W4" }

func (w *W4) Describe() string {
	return fmt.Sprintf("Delta EDS: %d resources (%s), then %d pushes of %d changed (%s each), ACKed",
		w.resources, sizeMB(w.pushes[0].Len), len(w.pushes)-1, w.churn, sizeKB(w.pushes[1].Len))
}

func (w *W4) Run(ctx context.Context, start StartMiddle) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	errs := newFirstError()
	var acks atomic.Int64
	gate := make(chan struct{})
	up, err := startUpstream(func(method string, s grpc.ServerStream) error {
		if method != MethodDelta {
			return wrongMethod(errs, method, MethodDelta)
		}
		var req discovery.DeltaDiscoveryRequest
		if err := recvRequest(s, &req); err != nil {
			return upstreamFailed(errs, err)
		}
		if req.TypeUrl != codec.TypeEndpoint || len(req.ResourceNamesSubscribe) != w.resources {
			return upstreamFailed(errs, fmt.Errorf("first request for %q subscribes %d names, want %d", req.TypeUrl, len(req.ResourceNamesSubscribe), w.resources))
		}
		for k, p := range w.pushes {
			if k == 1 {
				if err := waitGate(s, gate); err != nil {
					return err
				}
			}
			if err := sendMsg(s, p); err != nil {
				return upstreamFailed(errs, err)
			}
			if err := expectDeltaACK(s, w.nonces[k]); err != nil {
				return upstreamFailed(errs, err)
			}
			acks.Add(1)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	defer up.Stop()
	m, err := start(up.Addr())
	if err != nil {
		return res, err
	}
	defer func() { err = firstOf(err, m.Close()) }()
	cc, err := dialRaw(m.Addr())
	if err != nil {
		return res, err
	}
	defer cc.Close()
	s, err := openRaw(ctx, cc, MethodDelta)
	if err != nil {
		return res, err
	}
	if err := sendBytes(s, w.initial); err != nil {
		return res, err
	}
	if err := expectPush(s, w.pushes[0], "the initial state"); err != nil {
		return res, firstOf(errs.get(), err)
	}
	if err := sendBytes(s, w.acks[0]); err != nil {
		return res, err
	}
	if err := m.Begin(); err != nil {
		return res, err
	}
	t0 := time.Now()
	close(gate)
	for k := 1; k < len(w.pushes); k++ {
		if err := expectPush(s, w.pushes[k], fmt.Sprintf("push %d", k)); err != nil {
			return res, firstOf(errs.get(), err)
		}
		if err := sendBytes(s, w.acks[k]); err != nil {
			return res, err
		}
		res.Bytes += int64(w.pushes[k].Len)
	}
	res.Wall = time.Since(t0)
	if res.Middle, err = m.End(); err != nil {
		return res, err
	}
	if err := expectEnd(s); err != nil {
		return res, firstOf(errs.get(), err)
	}
	if err := errs.get(); err != nil {
		return res, err
	}
	res.Pushes, res.ACKs, res.Streams = len(w.pushes)-1, int(acks.Load()), 1
	if res.ACKs != len(w.pushes) {
		return res, fmt.Errorf("upstream counted %d ACKs, want %d", res.ACKs, len(w.pushes))
	}
	return res, nil
}

func sizeKB(n int) string { return fmt.Sprintf("%.0f KB", float64(n)/1e3) }
