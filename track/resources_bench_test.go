package track_test

import (
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/heapbench"
	"github.com/adstap/adstap/track"
	"google.golang.org/protobuf/proto"
)

// sotwCycleWith is sotwCycle under cfg.
func sotwCycleWith(tb testing.TB, cfg track.Config, typeURL string, subscribe []string, a, b []proto.Message) *pushCycle {
	c := sotwCycle(tb, typeURL, subscribe, a, b)
	c.tr = track.New(cfg)
	c.tr.OpenStream(track.StreamMeta{ID: 1, Method: adsSotW, OpenedAt: t0})
	c.tr.Request(1, t0, decodedRequest(tb, withNode(initial(typeURL, subscribe...), sidecar)), 100)
	return c
}

// BenchmarkTrackCDSPush10kResources is BenchmarkTrackCDSPush10k with each
// resource followed one by one (Config.Resources, for CSDS): what that adds
// to a push and its ACK.
func BenchmarkTrackCDSPush10kResources(b *testing.B) {
	a, v2 := w1Bodies(meshClusters(10_000))
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			sotwCycleWith(b, track.Config{Resources: on}, cds, nil, a, v2).bench(b, 10_000)
		})
	}
}

// BenchmarkResourcesMemory is the live heap of 1,000 streams each holding
// 10,000 clusters (SotW, named as gRPC's xDS client asks, ACKed), with and
// without Config.Resources: B/resource is what each resource costs.
func BenchmarkResourcesMemory(b *testing.B) {
	const streams, resources = 1_000, 10_000
	names := meshClusters(resources)
	var clusters []proto.Message
	for _, n := range names {
		clusters = append(clusters, cluster(n))
	}
	pushed := decodedPush(b, push(cds, 1, clusters...))
	sub := decodedRequest(b, withNode(initial(cds, names...), sidecar))
	acked := decodedRequest(b, ack(cds, 1, names...))
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			var per float64
			for b.Loop() {
				grown := heapbench.Grown(b, func() *track.Tracker {
					tr := track.New(track.Config{Resources: on})
					for id := range uint64(streams) {
						tr.OpenStream(track.StreamMeta{ID: id + 1, Method: adsSotW, OpenedAt: t0})
						tr.Request(id+1, t0, sub, 100)
						tr.Response(id+1, t0.Add(ms), pushed, 1000)
						tr.Request(id+1, t0.Add(2*ms), acked, 100)
					}
					return tr
				}, func(tr *track.Tracker) {
					cs := tr.ClientResources(func(n track.Node) bool { return false }, false)
					if len(cs) != 0 {
						b.Fatal("matched")
					}
				})
				per += float64(grown) / (streams * resources)
			}
			b.ReportMetric(per/float64(b.N), "B/resource")
		})
	}
}

var _ = codec.TypeCluster
