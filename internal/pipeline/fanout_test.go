package pipeline_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// TestFanOutsStayKeptAndChecked: fan-outs of one push to many streams, a
// first push then changes, as a control plane's full pushes reach a mesh,
// through the pipeline as `adstap run` ships it (the reference check on):
// with --nack-keep-bytes holding ten copies of the push, a sixth of the
// streams (each stream's views of the push take a fifteenth of it), every push is kept (the same bytes once) and every stream
// is still checked. With a copy per stream most pushes went unkept, their
// NACKs naming nothing, and the check stopped for their streams.
func TestFanOutsStayKeptAndChecked(t *testing.T) {
	leakcheck.Check(t)
	const streams = 60
	var v1, v2 []proto.Message
	for i, r := range xdsconfig.Clusters(100, 1000) {
		v1 = append(v1, r)
		if i%25 == 0 {
			c := proto.Clone(r).(*clusterv3.Cluster)
			c.ConnectTimeout = durationpb.New(7 * time.Second)
			r = c
		}
		v2 = append(v2, r)
	}
	pushes := [][]byte{benchPush(t, codec.TypeCluster, 1, v1), benchPush(t, codec.TypeCluster, 2, v2)}
	var log syncbuf.Buffer
	p, err := pipeline.NewUnstarted(pipeline.Config{Logger: slog.New(slog.NewTextHandler(&log, nil)), CheckReferences: true,
		Detect: track.Config{KeepBytes: int64(10 * len(pushes[0]))}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	o, at := p.TapObserver(), benchT0
	for id := uint64(1); id <= streams; id++ {
		o.OnStreamOpen(benchStream(id))
		o.OnFrame(benchStream(id), request(at, marshal(t, &discovery.DiscoveryRequest{Node: benchNode(t, int(id)), TypeUrl: codec.TypeCluster})))
	}
	for round := range 5 {
		k := round % 2 // v1, then v2 and v1 in turn
		at = at.Add(time.Second)
		for id := uint64(1); id <= streams; id++ {
			o.OnFrame(benchStream(id), response(at, pushes[k]))
		}
		if kept := p.Tracker.Kept(); kept.Skipped != 0 {
			t.Fatalf("fan-out %d: %d pushes not kept (%d bytes held), want every one kept once", round, kept.Skipped, kept.Bytes)
		}
		for id := uint64(1); id <= streams; id++ {
			o.OnFrame(benchStream(id), request(at, benchACK(t, codec.TypeCluster, k+1, nil)))
		}
		p.References.Dangling(context.Background(), "")
	}
	if n := p.References.Dropped(); n != 0 {
		t.Errorf("the check dropped %d pushes or requests", n)
	}
	if strings.Contains(log.String(), "no longer checked") {
		t.Errorf("the check stopped for some streams:\n%s", log.String())
	}
	shared, scanned := p.References.ScanStats()
	if scanned > 3*100 || shared == 0 {
		t.Errorf("the check scanned %d resources and found %d scanned for another stream, want each distinct one scanned once", scanned, shared)
	}
	for id := uint64(1); id <= streams; id++ {
		o.OnStreamClose(benchStream(id), tap.StreamEnd{Time: at})
	}
	if kept := p.Tracker.Kept(); kept.Bytes != 0 {
		t.Errorf("%d bytes still kept after every stream ended", kept.Bytes)
	}
}
