package export_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/track"
)

// pushAndACK hands References one SotW push of resources as the wiring does
// (the frame's buffers, by reference), then the tracker's ACK of it.
func pushAndACK(r *export.References, typeURL, nonce string, round uint64, resources ...*anypb.Any) {
	frame := xdstest.PushFrame(typeURL, "1", nonce, resources)
	data := mem.BufferSlice{mem.SliceBuffer(frame)}
	r.Response(3, t0, data)
	r.OnEvent(track.PushEnded{Push: track.Push{StreamID: 3, Node: track.Node{ID: node}, TypeURL: typeURL, Type: codec.ShortType(typeURL),
		Version: "1", Nonce: nonce, Round: round}, Result: track.ResultACK, At: t0})
}

// TestReferencesFindsARouteToNowhere: a route to a cluster the stream never
// accepted, through the output's queue: the live log's line and the page's
// entry.
func TestReferencesFindsARouteToNowhere(t *testing.T) {
	leakcheck.Check(t)
	var log syncbuf.Buffer
	r := export.NewReferences(export.ReferencesConfig{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer r.Close(context.Background())
	r.OpenStream(3, codec.SotW)
	pushAndACK(r, codec.TypeCluster, "c1", 1, xdstest.MustAny(xdsconfig.Cluster("a", false)))
	rc := xdsconfig.Route("r", "greeter", "b")
	rc.VirtualHosts[0].Routes[0].Metadata = xdsconfig.IstioConfig("virtual-service", "demo", "greeter")
	pushAndACK(r, codec.TypeRoute, "r1", 2, xdstest.MustAny(rc))

	got := r.Dangling(context.Background(), "")
	if len(got) != 1 || got[0].Kind != "route_cluster" || got[0].Target != "b" || got[0].NodeID != node ||
		got[0].IstioConfig == nil || got[0].IstioConfig.Kubectl != "kubectl get virtualservice -n demo greeter" {
		t.Fatalf("Dangling() = %+v, want the route to b from VirtualService demo/greeter", got)
	}
	if want := "dangling reference on stream 3: a route of virtual host vh-greeter in route configuration r sends all of its traffic to cluster b"; !strings.Contains(log.String(), want) {
		t.Errorf("the log lacks %q:\n%s", want, log.String())
	}
	if other := r.Dangling(context.Background(), "another-node"); len(other) != 0 {
		t.Errorf("Dangling(another node) = %+v, want none", other)
	}

	r.CloseStream(3)
	if got := r.Dangling(context.Background(), ""); len(got) != 0 {
		t.Errorf("after the stream closed, Dangling() = %+v", got)
	}
}

// TestReferencesStopCheckingAStreamThatLostAFrame: a push that does not fit
// in the queue is dropped, counted and said, and its stream is no longer
// checked: its graph would lack the push, and report what does not dangle.
func TestReferencesStopCheckingAStreamThatLostAFrame(t *testing.T) {
	leakcheck.Check(t)
	var log syncbuf.Buffer
	r := export.NewReferences(export.ReferencesConfig{QueueBytes: 2000, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	defer r.Close(context.Background())
	r.OpenStream(3, codec.SotW)
	// Too big for the queue: these clusters are never seen.
	pushAndACK(r, codec.TypeCluster, "c1", 1, xdstest.ClusterAnys(3, 1000)...)
	// A route to a cluster the stream does not have would dangle, were the
	// stream still checked.
	pushAndACK(r, codec.TypeCluster, "c2", 2, xdstest.MustAny(xdsconfig.Cluster("a", false)))
	pushAndACK(r, codec.TypeRoute, "r1", 2, xdstest.MustAny(xdsconfig.Route("r", "greeter", "b")))
	if got := r.Dangling(context.Background(), ""); len(got) != 0 {
		t.Errorf("Dangling() = %+v, want nothing from a stream no longer checked", got)
	}
	if r.Dropped() == 0 {
		t.Error("Dropped() = 0, want the push that did not fit")
	}
	if !strings.Contains(log.String(), "stream 3: references no longer checked") {
		t.Errorf("the log does not say the stream is no longer checked:\n%s", log.String())
	}
}
