package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countSpans is an exporter that counts the spans it is given.
type countSpans struct{ n atomic.Int64 }

func (c *countSpans) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.n.Add(int64(len(spans)))
	return nil
}
func (*countSpans) Shutdown(context.Context) error { return nil }

// acks collects the results of the pushes the tracker judged.
type acks struct {
	mu      sync.Mutex
	results []track.PushResult
}

func (a *acks) OnEvent(e track.Event) {
	if end, ok := e.(track.PushEnded); ok {
		a.mu.Lock()
		a.results = append(a.results, end.Result)
		a.mu.Unlock()
	}
}

func (a *acks) count(r track.PushResult) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, got := range a.results {
		if got == r {
			n++
		}
	}
	return n
}

// TestEveryOutputSeesAPush pushes one CDS response through a tap observed by
// a pipeline with every output on, and checks that each output saw it: the
// extra sink, /debug/streams, /debug/config, /metrics with the relay's own
// counters, the spans and the capture file.
func TestEveryOutputSeesAPush(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	const nodeID = "pipeline-node"
	cluster := xdsconfig.Cluster("outbound|80||svc.default.svc.cluster.local", false)
	// An extension of a type adstap does not know: /debug/config must show
	// it as its type URL and bytes, not give up on the whole cluster.
	cluster.TypedExtensionProtocolOptions = map[string]*anypb.Any{
		"acme.filters.widget": {TypeUrl: "type.googleapis.com/acme.Widget", Value: []byte{0x0a, 0x01, 'w'}},
	}
	clusters := map[resource.Type][]types.Resource{resource.ClusterType: {cluster}}
	cp.SetSnapshot(t, nodeID, "v1", clusters)

	capturePath := filepath.Join(t.TempDir(), "xds.capture")
	w, err := capture.NewWriter(capturePath, 1<<20, 2, "test", cp.Addr())
	if err != nil {
		t.Fatalf("capture.NewWriter: %v", err)
	}
	spans := &countSpans{}
	seen := &acks{}
	p, err := pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap: tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}},
		Observe: pipeline.Config{
			Version:        "test",
			Tracing:        &tracing.Config{Exporter: spans},
			RetainMaxBytes: 1 << 20,
			Capture:        w,
			Sinks:          []track.Sink{seen},
		},
		Listen: loopback,
	})
	if err != nil {
		t.Fatalf("pipeline.Start: %v", err)
	}
	if p.Tracing == nil || p.Retained == nil || p.Capture == nil {
		t.Fatalf("pipeline.Start left an output off: tracing %v, retained %v, capture %v", p.Tracing != nil, p.Retained != nil, p.Capture != nil)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cc := xdstest.DialRaw(t, p.Addr().Addr)
	stream := xdstest.OpenSotW(t, ctx, cc)
	node := &core.Node{Id: nodeID}
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatalf("send: %v", err)
	}
	resp := xdstest.RecvWithin(t, 5*time.Second, stream.Recv)
	if err := stream.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}); err != nil {
		t.Fatalf("send ACK: %v", err)
	}
	cp.WaitForRequest(t, 5*time.Second, func(r *discovery.DiscoveryRequest) bool { return r.ResponseNonce == resp.Nonce })
	xdstest.Eventually(t, "the tracker to judge the push", func() bool { return seen.count(track.ResultACK) == 1 })

	pages := p.Pages()
	// /debug/config applies the verdict from a queue of its own.
	xdstest.Eventually(t, "the accepted push in /debug/config", func() bool {
		rec := httptest.NewRecorder()
		pages["GET /debug/config"].ServeHTTP(rec, httptest.NewRequest("GET", "/debug/config?stream=1&type=cds", nil))
		return strings.Contains(rec.Body.String(), "outbound|80||svc.default.svc.cluster.local")
	})
	for _, c := range []struct{ pattern, path, want string }{
		{"GET /debug/streams", "/debug/streams", nodeID},
		{"GET /debug/config", "/debug/config?stream=1&type=cds", "outbound|80||svc.default.svc.cluster.local"},
		{"GET /debug/config", "/debug/config?stream=1&type=cds", `"adstap.unknown_type_url": "type.googleapis.com/acme.Widget"`},
		{"GET /metrics", "/metrics", `adstap_acks_total`},
		// The relay's own counters reach /metrics.
		{"GET /metrics", "/metrics", `adstap_messages_total{direction="response",protocol="sotw"} 1`},
	} {
		h, ok := pages[c.pattern]
		if !ok {
			t.Errorf("Pages() has no %q", c.pattern)
			continue
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
		if body := rec.Body.String(); !strings.Contains(body, c.want) {
			t.Errorf("GET %s: want %q in\n%s", c.path, c.want, body)
		}
	}

	cancel()
	cc.Close()
	sctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := p.Close(sctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Err(); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if spans.n.Load() == 0 {
		t.Error("Close flushed no spans: want at least the push's")
	}
	frames := captureFrames(t, capturePath)
	if len(frames) < 3 {
		t.Errorf("capture holds %d frames: want the request, the response and the ACK", len(frames))
	}
	for _, f := range frames {
		if f.TypeURL != resource.ClusterType {
			t.Errorf("captured %s frame has type_url %q, want %q", f.Direction, f.TypeURL, resource.ClusterType)
		}
	}
}

// loopback is a listener on a free loopback port.
var loopback = tap.Address{Network: "tcp", Addr: "127.0.0.1:0"}

// TestWithoutOutputs is the zero configuration: tracker, live log and
// metrics, with nothing to flush.
func TestWithoutOutputs(t *testing.T) {
	leakcheck.Check(t)
	p, err := pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap:     tap.Config{Upstream: tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}},
		Observe: pipeline.Config{Tracing: &tracing.Config{}},
		Listen:  loopback,
	})
	if err != nil {
		t.Fatalf("pipeline.Start: %v", err)
	}
	if p.Tracing != nil || p.Retained != nil || p.Capture != nil {
		t.Errorf("outputs on without being asked: tracing %v, retained %v, capture %v", p.Tracing != nil, p.Retained != nil, p.Capture != nil)
	}
	if p.AdminAddr() != "" || p.MetricsAddr() != "" {
		t.Errorf("servers on without being asked: admin %q, metrics %q", p.AdminAddr(), p.MetricsAddr())
	}
	off := httptest.NewRecorder()
	p.Pages()["GET /debug/config"].ServeHTTP(off, httptest.NewRequest("GET", "/debug/config?stream=1&type=cds", nil))
	if off.Code != http.StatusNotFound || !strings.Contains(off.Body.String(), "--retain-resources") {
		t.Errorf("/debug/config without retained resources: %d %q, want 404 naming --retain-resources", off.Code, off.Body.String())
	}
	rec := httptest.NewRecorder()
	p.Pages()["GET /metrics"].ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Errorf("GET /metrics: status %d", rec.Code)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
	// Close again is a no-op.
	if err := p.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestStartServesTheAdminPages: the admin server answers /healthz, /readyz
// (ready: the tap listens), the pipeline's pages and the pages added; the
// metrics server /metrics alone.
func TestStartServesTheAdminPages(t *testing.T) {
	leakcheck.Check(t)
	p, err := pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap:           tap.Config{Upstream: tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}},
		Listen:        loopback,
		Admin:         "127.0.0.1:0",
		AdminPages:    map[string]http.Handler{"GET /extra": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "extra") })},
		MetricsListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatalf("pipeline.Start: %v", err)
	}
	defer p.Close(context.Background())
	for _, c := range []struct {
		addr, path string
		wantCode   int
		want       string
	}{
		{p.AdminAddr(), "/healthz", 200, "ok"},
		{p.AdminAddr(), "/readyz", 200, "ready"},
		{p.AdminAddr(), "/extra", 200, "extra"},
		{p.AdminAddr(), "/debug/streams", 200, "{"},
		{p.AdminAddr(), "/metrics", 200, "adstap_"},
		{p.MetricsAddr(), "/metrics", 200, "adstap_"},
		{p.MetricsAddr(), "/debug/streams", 404, ""},
	} {
		resp, err := http.Get("http://" + c.addr + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.wantCode || !strings.Contains(string(body), c.want) {
			t.Errorf("GET http://%s%s = %d %.80q, want %d with %q", c.addr, c.path, resp.StatusCode, body, c.wantCode, c.want)
		}
	}
}

// TestStartFailsCleanly: whatever fails, Start says what, stops what it
// had started (leakcheck: no clock, server or worker left) and closes the
// capture it was handed.
func TestStartFailsCleanly(t *testing.T) {
	leakcheck.Check(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	up := tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}
	badTracing := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}
	for _, tc := range []struct {
		name      string
		cfg       pipeline.RunConfig
		want      string
		wantWhich pipeline.Listener
	}{
		{"tracing", pipeline.RunConfig{Tap: tap.Config{Upstream: up}, Listen: loopback, Observe: pipeline.Config{Tracing: &tracing.Config{
			Endpoint: "http://127.0.0.1:4317", Getenv: func(k string) string { return badTracing[k] }}}}, "tracing", -1},
		{"an observer of its own", pipeline.RunConfig{Tap: tap.Config{Upstream: up, Observer: tap.ObserverFuncs{}}, Listen: loopback}, "Observer must be nil", -1},
		{"tap", pipeline.RunConfig{Listen: loopback}, "upstream", -1},
		{"admin", pipeline.RunConfig{Tap: tap.Config{Upstream: up}, Listen: loopback, Admin: busy.Addr().String()}, "--admin: ", pipeline.ListenAdmin},
		{"metrics", pipeline.RunConfig{Tap: tap.Config{Upstream: up}, Listen: loopback, Admin: "127.0.0.1:0", MetricsListen: busy.Addr().String()}, "--metrics-listen: ", pipeline.ListenMetrics},
		{"listen", pipeline.RunConfig{Tap: tap.Config{Upstream: up}, Listen: tap.Address{Network: "tcp", Addr: busy.Addr().String()}, Admin: "127.0.0.1:0", MetricsListen: "127.0.0.1:0"}, "--listen: ", pipeline.ListenRelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := capture.NewWriter(filepath.Join(t.TempDir(), "xds.capture"), 1<<20, 2, "test", up.Addr)
			if err != nil {
				t.Fatal(err)
			}
			tc.cfg.Observe.Capture = w
			p, err := pipeline.Start(context.Background(), tc.cfg)
			if err == nil {
				p.Close(context.Background())
				t.Fatalf("Start succeeded, want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start: %v, want an error with %q", err, tc.want)
			}
			var le *pipeline.ListenError
			if errors.As(err, &le) {
				if le.Listener != tc.wantWhich {
					t.Errorf("ListenError.Listener = %v, want %v", le.Listener, tc.wantWhich)
				}
			} else if tc.wantWhich >= 0 {
				t.Errorf("Start: %v, want a ListenError for %s", err, tc.wantWhich)
			}
			if w.Write(capture.Record{Kind: capture.KindOpen}) == nil {
				t.Error("the capture is still open")
			}
		})
	}
}

func captureFrames(t *testing.T, path string) []capture.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open capture: %v", err)
	}
	defer f.Close()
	rd := capture.NewReader(f, path)
	var frames []capture.Record
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return frames
		}
		if err != nil {
			t.Fatalf("reading capture: %v", err)
		}
		if rec.Kind == "frame" {
			frames = append(frames, rec)
		}
	}
}

// TestRetainedConfigurationCountsOnlyWhatWasAccepted: the tracker is the
// one place a push waits for its answer; the retained configuration keeps
// what each ACK accepted, so --retain-max-bytes bounds that alone. A
// budget of one and a half times a push holds the accepted push and takes
// the next once it is ACKed. A store that kept its own copy of every push
// until its answer needed twice the push, and said it was incomplete.
func TestRetainedConfigurationCountsOnlyWhatWasAccepted(t *testing.T) {
	leakcheck.Check(t)
	v1, v2 := xdstest.ClusterAnys(8, 8<<10), xdstest.ClusterAnys(8, 8<<10)
	size := 0
	for i, a := range v2 {
		cl := xdsconfig.Clusters(8, 8<<10)[i].(*clusterv3.Cluster)
		cl.ConnectTimeout = durationpb.New(7 * time.Second)
		v2[i] = xdstest.MustAny(cl)
		size += len(a.Value)
	}
	p, err := pipeline.NewUnstarted(pipeline.Config{RetainMaxBytes: int64(size * 3 / 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	o, s, at := p.Tracking(), benchStream(1), benchT0
	page := func() retained.Page {
		rec := httptest.NewRecorder()
		p.Pages()["GET /debug/config"].ServeHTTP(rec, httptest.NewRequest("GET", "/debug/config?stream=1&type=cds", nil))
		var got retained.Page
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil {
			t.Fatalf("/debug/config: %d %s", rec.Code, rec.Body.String())
		}
		return got
	}
	o.OnStreamOpen(s)
	o.OnFrame(s, request(at, xdstest.RequestFrame(&core.Node{Id: "retained"}, codec.TypeCluster, "", "", "")))
	o.OnFrame(s, response(at, xdstest.PushFrame(codec.TypeCluster, "1", "n1", v1)))
	o.OnFrame(s, request(at, xdstest.RequestFrame(nil, codec.TypeCluster, "1", "n1", "")))
	if got := page(); got.Version != "1" || len(got.Resources) != 8 || got.Incomplete {
		t.Fatalf("after the ACK of v1: version %q, %d resources, incomplete %v; want 1, 8, false", got.Version, len(got.Resources), got.Incomplete)
	}
	o.OnFrame(s, response(at, xdstest.PushFrame(codec.TypeCluster, "2", "n2", v2)))
	if got := page(); got.Version != "1" {
		t.Errorf("v2 awaiting its answer: /debug/config shows version %q, want what was accepted, 1", got.Version)
	}
	o.OnFrame(s, request(at, xdstest.RequestFrame(nil, codec.TypeCluster, "2", "n2", "")))
	got := page()
	if got.Version != "2" || len(got.Resources) != 8 || got.Incomplete {
		t.Fatalf("after the ACK of v2 (budget %d bytes, pushes of %d): version %q, %d resources, incomplete %v; want 2, 8, false",
			size*3/2, size, got.Version, len(got.Resources), got.Incomplete)
	}
	var cluster struct{ ConnectTimeout string }
	if err := json.Unmarshal(got.Resources[0], &cluster); err != nil || cluster.ConnectTimeout != "7s" {
		t.Errorf("after the ACK of v2, a cluster reads %s, want v2's connectTimeout 7s", got.Resources[0])
	}
}
