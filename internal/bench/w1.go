package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// W1 is a large SotW CDS push, repeated: the upstream sends it, the client
// receives it whole and ACKs, and the upstream sends the next one on the
// ACK. Consecutive pushes alternate between two bodies that differ in 2 %
// of the clusters, and every push has a version and nonce of its own, so
// the tracker diffs every push as it would istiod's.
type W1 struct {
	clusters int
	pushes   []Msg // [0] warms the connection up; [1:] are measured
	nonces   []string
	acks     [][]byte
	initial  []byte
}

// NewW1 builds W1's pushes.
func NewW1(s Sizes) *W1 {
	res := xdsconfig.Clusters(s.W1Clusters, s.W1PadTo)
	a := make([]proto.Message, len(res))
	b := make([]proto.Message, len(res))
	for i, r := range res {
		a[i], b[i] = r, r
		if i%50 == 0 {
			c := proto.Clone(r).(*clusterv3.Cluster)
			c.ConnectTimeout = durationpb.New(7 * time.Second)
			b[i] = c
		}
	}
	bodies := [2][]byte{sotwBody(a), sotwBody(b)}
	w := &W1{clusters: s.W1Clusters}
	w.initial = mustMarshal(&discovery.DiscoveryRequest{Node: node(0), TypeUrl: codec.TypeCluster})
	for i := 0; i <= s.W1Pushes; i++ {
		v, n := pushVersion("w1", i), pushNonce("w1", i)
		w.pushes = append(w.pushes, sotwPush(v, n, codec.TypeCluster, bodies[i%2]))
		w.nonces = append(w.nonces, n)
		w.acks = append(w.acks, sotwACK(v, n, codec.TypeCluster, nil))
	}
	return w
}

func (*W1) ID() string { return "W1" }

func (w *W1) Describe() string {
	return fmt.Sprintf("SotW CDS push of %d clusters (%s), ACKed, %d times", w.clusters, sizeMB(w.pushes[0].Len), len(w.pushes)-1)
}

func (w *W1) Run(ctx context.Context, start StartMiddle) (res Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	errs := newFirstError()
	var acks atomic.Int64
	gate := make(chan struct{})
	up, err := startUpstream(func(method string, s grpc.ServerStream) error {
		if method != MethodSotW {
			return wrongMethod(errs, method, MethodSotW)
		}
		var req discovery.DiscoveryRequest
		if err := recvRequest(s, &req); err != nil {
			return upstreamFailed(errs, err)
		}
		if req.TypeUrl != codec.TypeCluster || req.Node.GetId() == "" {
			return upstreamFailed(errs, fmt.Errorf("first request for %q from %q", req.TypeUrl, req.Node.GetId()))
		}
		for i, p := range w.pushes {
			if i == 1 {
				if err := waitGate(s, gate); err != nil {
					return err
				}
			}
			if err := sendMsg(s, p); err != nil {
				return upstreamFailed(errs, err)
			}
			if err := expectACK(s, w.nonces[i]); err != nil {
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
	s, err := openRaw(ctx, cc, MethodSotW)
	if err != nil {
		return res, err
	}
	if err := sendBytes(s, w.initial); err != nil {
		return res, err
	}
	if err := expectPush(s, w.pushes[0], "push 0"); err != nil {
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
	for i := 1; i < len(w.pushes); i++ {
		if err := expectPush(s, w.pushes[i], fmt.Sprintf("push %d", i)); err != nil {
			return res, firstOf(errs.get(), err)
		}
		if err := sendBytes(s, w.acks[i]); err != nil {
			return res, err
		}
		res.Bytes += int64(w.pushes[i].Len)
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

func firstOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
