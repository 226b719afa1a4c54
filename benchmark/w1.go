package benchmark

import (
	"context"
	"fmt"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// w1 is a large SotW CDS push, repeated: the upstream sends it, the client
// receives it whole and ACKs, and the upstream sends the next one on the
// ACK. Consecutive pushes alternate between two bodies that differ in 2 %
// of the clusters, and every push has a version and nonce of its own, so
// the tracker diffs every push as it would istiod's.
type w1 struct {
	clusters int
	pushSequence
}

// NewW1 builds W1's pushes.
func NewW1(s Sizes) *w1 {
	a, b := clusterVersions(s.W1Clusters, s.W1PadTo)
	bodies := [2][]byte{sotwBody(a), sotwBody(b)}
	w := &w1{clusters: s.W1Clusters, pushSequence: pushSequence{
		method:       methodSotW,
		initial:      mustMarshal(&discovery.DiscoveryRequest{Node: node(0), TypeUrl: codec.TypeCluster}),
		warmUp:       "push 0", // warms the connection up; the rest are measured
		checkInitial: checkW1Initial,
		expectACK:    expectACK,
	}}
	for i := 0; i <= s.W1Pushes; i++ {
		v, n := pushVersion("w1", i), pushNonce("w1", i)
		w.pushes = append(w.pushes, sotwPush(v, n, codec.TypeCluster, bodies[i%2]))
		w.nonces = append(w.nonces, n)
		w.acks = append(w.acks, sotwACK(v, n, codec.TypeCluster, nil))
	}
	return w
}

// clusterVersions are n Istio-shaped clusters of about padTo bytes each, in
// two versions that differ in 2 % of them, as consecutive pushes of a
// control plane do.
func clusterVersions(n, padTo int) (a, b []proto.Message) {
	res := xdsconfig.Clusters(n, padTo)
	a = make([]proto.Message, len(res))
	b = make([]proto.Message, len(res))
	for i, r := range res {
		a[i], b[i] = r, r
		if i%50 == 0 {
			c := proto.Clone(r).(*clusterv3.Cluster)
			c.ConnectTimeout = durationpb.New(7 * time.Second)
			b[i] = c
		}
	}
	return a, b
}

func (*w1) ID() string { return "W1" }

func (w *w1) Describe() string {
	return fmt.Sprintf("SotW CDS push of %d clusters (%s), ACKed, %d times", w.clusters, sizeMB(w.pushes[0].Len), len(w.pushes)-1)
}

func (w *w1) Run(ctx context.Context, start StartMiddle) (Result, error) { return w.run(ctx, start) }

// checkW1Initial wants the client's first CDS request, with its node.
func checkW1Initial(s msgStream) error {
	var req discovery.DiscoveryRequest
	if err := recvRequest(s, &req); err != nil {
		return err
	}
	if req.TypeUrl != codec.TypeCluster || req.Node.GetId() == "" {
		return fmt.Errorf("first request for %q from %q", req.TypeUrl, req.Node.GetId())
	}
	return nil
}
