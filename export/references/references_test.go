package references_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/track"
)

// countingPool is gRPC's buffer pool as far as a test can see it: it
// counts the buffers given back, which happens when the last reference to
// one is let go.
type countingPool struct{ returned atomic.Int64 }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.returned.Add(1) }

// received is msg as the relay holds it: in buffers of 16 KB, as gRPC
// receives a large message, each with one reference.
func received(msg []byte, pool mem.BufferPool) mem.BufferSlice {
	var data mem.BufferSlice
	for _, seg := range xdstest.Chunk(msg, 16<<10) {
		data = append(data, mem.NewBuffer(&seg, pool))
	}
	return data
}

// refStream feeds a tracker, as the pipeline wires it for the reference
// check, and its sinks: stream 3, SotW, node node. Each push's bytes are
// in buffers of pool, which the stream lets go of once the tracker has
// seen them, as the tap does.
type refStream struct {
	t     testing.TB
	tk    *track.Tracker
	sinks []track.Sink
	pool  *countingPool
	gets  int64 // buffers taken from pool
	at    time.Time
	asked map[string]bool
}

func openRefStream(t testing.TB, cfg track.Config, sinks ...track.Sink) *refStream {
	t.Helper()
	s := &refStream{t: t, tk: track.New(cfg), sinks: sinks, pool: &countingPool{}, at: t0, asked: map[string]bool{}}
	takeAll(s.tk, sinks...)
	s.feed(s.tk.OpenStream(track.StreamMeta{ID: 3, Method: ads, Protocol: codec.SotW, OpenedAt: t0}))
	return s
}

// takeAll has each output among sinks that takes what the tracker keeps
// of pushes take it, as the pipeline does before any stream.
func takeAll(tk *track.Tracker, sinks ...track.Sink) {
	for _, s := range sinks {
		if t, ok := s.(interface{ Take(*track.Tracker) }); ok {
			t.Take(tk)
		}
	}
}

func (s *refStream) feed(evs []track.Event) {
	for _, e := range evs {
		for _, k := range s.sinks {
			k.OnEvent(e)
		}
	}
}

func (s *refStream) request(req *codec.Request) {
	s.at = s.at.Add(time.Millisecond)
	s.feed(s.tk.Request(3, s.at, req, 64))
}

// push sends a SotW push of resources, after the type's first request.
func (s *refStream) push(typeURL, nonce string, resources ...*anypb.Any) {
	s.t.Helper()
	if !s.asked[typeURL] {
		s.asked[typeURL] = true
		req := &codec.Request{TypeURL: typeURL}
		if len(s.asked) == 1 {
			req.Node = &codec.NodeIdentity{ID: node}
		}
		s.request(req)
	}
	data := received(xdstest.PushFrame(typeURL, "1", nonce, resources), s.pool)
	s.gets += int64(len(data))
	var resp codec.Response
	if err := resp.DecodeBuffers(data, false); err != nil {
		s.t.Fatal(err)
	}
	s.at = s.at.Add(time.Millisecond)
	s.feed(s.tk.ResponseFrame(3, s.at, &resp, data.Len(), data))
	data.Free()
}

// ack acknowledges the push with nonce.
func (s *refStream) ack(typeURL, nonce string) {
	s.request(&codec.Request{TypeURL: typeURL, VersionInfo: "1", ResponseNonce: nonce})
}

// pushAndACK sends a push of resources and acknowledges it.
func (s *refStream) pushAndACK(typeURL, nonce string, resources ...*anypb.Any) {
	s.t.Helper()
	s.push(typeURL, nonce, resources...)
	s.ack(typeURL, nonce)
}

func (s *refStream) close() {
	s.feed(s.tk.CloseStream(3, s.at, 0, ""))
}

// TestReferencesFindsARouteToNowhere: a route to a cluster the stream never
// accepted, through the output's queue: the live log's line and the page's
// entry.
func TestReferencesFindsARouteToNowhere(t *testing.T) {
	leakcheck.Check(t)
	var log syncbuf.Buffer
	r := references.New(references.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.NewTextHandler(&log, nil))}})
	defer r.Close(context.Background())
	s := openRefStream(t, track.Config{}, r)
	s.pushAndACK(codec.TypeCluster, "c1", xdstest.MustAny(xdsconfig.Cluster("a", false)))
	rc := xdsconfig.Route("r", "greeter", "b")
	rc.VirtualHosts[0].Routes[0].Metadata = xdsconfig.IstioConfig("virtual-service", "demo", "greeter")
	s.pushAndACK(codec.TypeRoute, "r1", xdstest.MustAny(rc))

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

	s.close()
	if got := r.Dangling(context.Background(), ""); len(got) != 0 {
		t.Errorf("after the stream closed, Dangling() = %+v", got)
	}
}

// TestReferencesFollowWhatAPushDropped: a CDS push after the first is
// handed over as what it changed (track.Accepted.Partial); a cluster it no
// longer carries is gone all the same, and the route to it dangles until a
// push brings it back.
func TestReferencesFollowWhatAPushDropped(t *testing.T) {
	leakcheck.Check(t)
	r := references.New(references.Config{})
	defer r.Close(context.Background())
	s := openRefStream(t, track.Config{}, r)
	a, b := xdstest.MustAny(xdsconfig.Cluster("a", false)), xdstest.MustAny(xdsconfig.Cluster("b", false))
	s.pushAndACK(codec.TypeCluster, "c1", a, b)
	s.pushAndACK(codec.TypeRoute, "r1", xdstest.MustAny(xdsconfig.Route("r", "greeter", "b")))
	if got := r.Dangling(context.Background(), ""); len(got) != 0 {
		t.Fatalf("Dangling() = %+v, want none", got)
	}
	s.pushAndACK(codec.TypeCluster, "c2", a)
	if got := r.Dangling(context.Background(), ""); len(got) != 1 || got[0].Target != "b" {
		t.Fatalf("after b was dropped, Dangling() = %+v, want the route to b", got)
	}
	s.pushAndACK(codec.TypeCluster, "c3", a, b)
	if got := r.Dangling(context.Background(), ""); len(got) != 0 {
		t.Fatalf("after b came back, Dangling() = %+v, want none", got)
	}
	s.close()
}

// gatedWriter holds the first write until open is closed, and says when it
// has begun: the output's goroutine is then busy, and what is handed to it
// waits in its queue.
type gatedWriter struct {
	log           *syncbuf.Buffer
	once          sync.Once
	entered, open chan struct{}
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		<-w.open
	})
	return w.log.Write(p)
}

// TestReferencesStopCheckingAStreamThatLostAFrame: a push that does not fit
// in the queue is dropped, counted and said, and its stream is no longer
// checked: its graph would lack the push, and report what does not dangle.
func TestReferencesStopCheckingAStreamThatLostAFrame(t *testing.T) {
	leakcheck.Check(t)
	var log syncbuf.Buffer
	w := &gatedWriter{log: &log, entered: make(chan struct{}), open: make(chan struct{})}
	r := references.New(references.Config{OutputConfig: export.OutputConfig{QueueBytes: 2000, Logger: slog.New(slog.NewTextHandler(w, nil))}})
	defer r.Close(context.Background())
	s := openRefStream(t, track.Config{}, r)
	// A route to nowhere: the output's goroutine writes its line, and
	// waits, while two pushes larger than the queue come: the first is
	// held beyond the bound, the second does not fit.
	s.pushAndACK(codec.TypeRoute, "r0", xdstest.MustAny(xdsconfig.Route("r", "greeter", "b")))
	s.pushAndACK(codec.TypeCluster, "c0", xdstest.MustAny(xdsconfig.Cluster("a", false)))
	<-w.entered
	s.pushAndACK(codec.TypeCluster, "c1", xdstest.ClusterAnys(3, 1000)...)
	// Too big for the queue: these clusters are never seen.
	s.pushAndACK(codec.TypeCluster, "c2", xdstest.ClusterAnys(3, 1200)...)
	close(w.open)
	// A route to a cluster the stream does not have would dangle, were the
	// stream still checked.
	s.pushAndACK(codec.TypeCluster, "c3", xdstest.MustAny(xdsconfig.Cluster("a", false)))
	s.pushAndACK(codec.TypeRoute, "r1", xdstest.MustAny(xdsconfig.Route("r", "greeter", "b")))
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

// TestReferencesCheckAPushLargerThanTheQueue: a push larger than the whole
// queue (a 40 MB CDS push, --output-queue-bytes 16 MiB) is held beyond the
// bound and checked: the dangling reference it brings is found.
func TestReferencesCheckAPushLargerThanTheQueue(t *testing.T) {
	leakcheck.Check(t)
	r := references.New(references.Config{OutputConfig: export.OutputConfig{QueueBytes: 2000}})
	defer r.Close(context.Background())
	s := openRefStream(t, track.Config{}, r)
	s.pushAndACK(codec.TypeCluster, "c1", xdstest.MustAny(xdsconfig.Cluster("a", false)))
	rc := xdsconfig.Route("r", "greeter", "b")
	for i := range 100 {
		rc.VirtualHosts[0].Domains = append(rc.VirtualHosts[0].Domains, fmt.Sprintf("greeter-%03d.demo.svc.cluster.local", i))
	}
	s.pushAndACK(codec.TypeRoute, "r1", xdstest.MustAny(rc))
	if size := len(xdstest.PushFrame(codec.TypeRoute, "1", "r1", []*anypb.Any{xdstest.MustAny(rc)})); size <= 2000 {
		t.Fatalf("the push is %d bytes, not larger than the queue", size)
	}
	got := r.Dangling(context.Background(), "")
	if len(got) != 1 || got[0].Kind != "route_cluster" || got[0].Target != "b" {
		t.Errorf("Dangling() = %+v, want the route to b of the push larger than the queue", got)
	}
	if r.Dropped() != 0 {
		t.Errorf("Dropped() = %d, want 0", r.Dropped())
	}
}

// TestReferencesHoldNothingOnceChecked: what the tracker hands over —
// shared with the retained configuration and tracing, as the pipeline
// wires them, each an owner of the same bytes — is let go of once all of
// them are done: pushes held whole and kept compact, ACKed, superseded and
// NACKed. Nothing stays kept, and every buffer the pushes came in is back
// in the pool.
func TestReferencesHoldNothingOnceChecked(t *testing.T) {
	leakcheck.Check(t)
	r := references.New(references.Config{})
	store := retained.New(retained.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.DiscardHandler), QueueBytes: 0}, MaxBytes: 1 << 20})
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: &eventtest.SpanRecorder{}, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	s := openRefStream(t, track.Config{}, r, store, tr)
	clusters := func(changed string) []*anypb.Any {
		var out []*anypb.Any
		for i := range 8 {
			c := xdsconfig.Cluster(fmt.Sprintf("outbound|80||svc-%d.shop.svc.cluster.local", i), false)
			if c.Name == changed {
				c.ConnectTimeout = durationpb.New(7 * time.Second)
			}
			out = append(out, xdstest.MustAny(c))
		}
		return out
	}
	s.pushAndACK(codec.TypeCluster, "c1", clusters("")...)                                          // held whole
	s.pushAndACK(codec.TypeCluster, "c2", clusters("outbound|80||svc-3.shop.svc.cluster.local")...) // kept compact
	s.push(codec.TypeCluster, "c3", clusters("outbound|80||svc-4.shop.svc.cluster.local")...)
	s.pushAndACK(codec.TypeCluster, "c4", clusters("outbound|80||svc-5.shop.svc.cluster.local")...) // supersedes c3
	s.push(codec.TypeCluster, "c5", clusters("outbound|80||svc-6.shop.svc.cluster.local")...)
	s.request(&codec.Request{TypeURL: codec.TypeCluster, VersionInfo: "1", ResponseNonce: "c5", ErrorDetail: &codec.ErrorDetail{Code: 3, Message: "bad"}})
	s.close()
	for _, c := range []interface{ Close(context.Context) error }{r, store} {
		if err := c.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if got := s.tk.Kept().Bytes; got != 0 {
		t.Errorf("%d bytes still kept", got)
	}
	if gets, puts := s.gets, s.pool.returned.Load(); gets != puts {
		t.Errorf("%d buffers of %d back in the pool", puts, gets)
	}
}

// TestReferencesApplyAnACKBeforeItsSubscriptionChange: a request that ACKs
// a push and drops a name from the subscription leaves the client with the
// push applied, then without what it dropped: the route configuration it
// no longer wants, whose route leads nowhere, is gone, and nothing dangles.
func TestReferencesApplyAnACKBeforeItsSubscriptionChange(t *testing.T) {
	leakcheck.Check(t)
	r := references.New(references.Config{})
	defer r.Close(context.Background())
	s := openRefStream(t, track.Config{}, r)
	s.pushAndACK(codec.TypeCluster, "c1", xdstest.MustAny(xdsconfig.Cluster("y", false)))
	s.asked[codec.TypeRoute] = true
	s.request(&codec.Request{TypeURL: codec.TypeRoute, ResourceNames: []string{"a", "b"}})
	s.push(codec.TypeRoute, "r1", xdstest.MustAny(xdsconfig.Route("a", "greeter", "x")), xdstest.MustAny(xdsconfig.Route("b", "greeter", "y")))
	s.request(&codec.Request{TypeURL: codec.TypeRoute, VersionInfo: "1", ResponseNonce: "r1", ResourceNames: []string{"b"}})
	if got := r.Dangling(context.Background(), ""); len(got) != 0 {
		t.Errorf("Dangling() = %+v, want nothing: the route configuration to x was dropped after the ACK", got)
	}
}
