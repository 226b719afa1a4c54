package pipeline_test

import (
	"context"
	"runtime"
	"testing"
	"weak"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// TestObserverLetsGoOfAnAnsweredPush: once a push is answered and the
// outputs are done with it, nothing the observation keeps for the next
// push (its decoding space) points into the push's bytes, so a sidecar
// idle after a 100 MB push can give those back at its next collection.
func TestObserverLetsGoOfAnAnsweredPush(t *testing.T) {
	leakcheck.Check(t)
	p := newShippedPipeline(t)
	defer closePipeline(t, p)
	pushed := func() weak.Pointer[byte] {
		var clusters []proto.Message
		for _, c := range xdsconfig.Clusters(2_000, 940) {
			clusters = append(clusters, c)
		}
		push := benchPush(t, codec.TypeCluster, 1, clusters)
		o, s, at := p.Tracking(), benchStream(1), benchT0
		o.OnStreamOpen(s)
		o.OnFrame(s, request(at, marshal(t, &discovery.DiscoveryRequest{Node: benchNode(t, 0), TypeUrl: codec.TypeCluster})))
		o.OnFrame(s, response(at, push))
		o.OnFrame(s, request(at, benchACK(t, codec.TypeCluster, 1, nil)))
		p.References.Dangling(context.Background(), "")
		return weak.Make(&push[0])
	}()
	runtime.GC()
	if pushed.Value() != nil {
		t.Error("the push's bytes are still reachable after it was ACKed and a collection ran")
	}
}
