package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/internal/testutil/heapbench"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
)

// The benchmarks drive a pipeline as the bench harness's tap-full path
// wires it (benchmark: the live log in the text format, metrics,
// tracing with spans discarded) with the frames of W5 and W6, so that what
// observation costs per push and holds per stream is measured without the
// relay, the clients and the noise of the whole workload. A frame reaches
// the observer as gRPC hands it over: a response in 16 KB pieces.

type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

func benchPipeline(b *testing.B) *pipeline.Pipeline {
	b.Helper()
	p := newBenchPipeline(b)
	b.Cleanup(func() { closePipeline(b, p) })
	return p
}

func newBenchPipeline(b *testing.B) *pipeline.Pipeline {
	b.Helper()
	p, err := pipeline.NewUnstarted(pipeline.Config{
		Logger:  slog.New(export.NewPretty(io.Discard, slog.LevelInfo)),
		Version: "bench",
		Tracing: &tracing.Config{Exporter: discardSpans{}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// newShippedPipeline is the observation `adstap run` ships: its default
// flags made a configuration by runconfig.Build, its log discarded.
func newShippedPipeline(b testing.TB) *pipeline.Pipeline {
	b.Helper()
	p := newPipelineFromFlags(b, runconfig.Defaults())
	if p.References == nil {
		b.Fatal("the shipped configuration has no reference check")
	}
	return p
}

// newLeanPipeline is the shipped observation with every optional output
// off, as the bench's tap-lean path runs it.
func newLeanPipeline(b testing.TB) *pipeline.Pipeline {
	b.Helper()
	f := runconfig.Defaults()
	f.CheckReferences = false
	return newPipelineFromFlags(b, f)
}

func newPipelineFromFlags(b testing.TB, f runconfig.Flags) *pipeline.Pipeline {
	b.Helper()
	f.Upstream, f.Listen = "127.0.0.1:1", "127.0.0.1:0"
	run, err := runconfig.Build(f, runconfig.Env{Logger: slog.New(slog.DiscardHandler), Version: "bench", Getenv: func(string) string { return "" }})
	if err != nil {
		b.Fatal(err)
	}
	p, err := pipeline.NewUnstarted(run.Observe)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func closePipeline(b testing.TB, p *pipeline.Pipeline) {
	if err := p.Close(context.Background()); err != nil {
		b.Error(err)
	}
}

const benchMethod = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

var benchT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func benchStream(id uint64) tap.StreamInfo {
	return tap.StreamInfo{ID: id, ConnID: id, Method: benchMethod, Protocol: codec.SotW, OpenedAt: benchT0}
}

// benchNode is what sidecar i says in its first request, metadata included.
func benchNode(b testing.TB, i int) *core.Node {
	md, err := structpb.NewStruct(map[string]any{
		"NAMESPACE": fmt.Sprintf("ns-%d", i%17), "ISTIO_VERSION": "1.28.0", "CLUSTER_ID": "Kubernetes",
		"NAME": fmt.Sprintf("bench-%05d-7d9f8c6b5-x2x9z", i),
	})
	if err != nil {
		b.Fatal(err)
	}
	return &core.Node{
		Id:            fmt.Sprintf("sidecar~10.0.%d.%d~bench-%05d-7d9f8c6b5-x2x9z.ns-%d~ns-%d.svc.cluster.local", i>>8&255, i&255, i, i%17, i%17),
		Cluster:       fmt.Sprintf("bench-%05d.ns-%d", i, i%17),
		Metadata:      md,
		UserAgentName: "envoy", UserAgentVersionType: &core.Node_UserAgentVersion{UserAgentVersion: "1.36.0"},
	}
}

func marshal(b testing.TB, m proto.Message) []byte {
	b.Helper()
	bs, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return bs
}

// benchPush is a SotW response of resources under version n.
func benchPush(b testing.TB, typeURL string, n int, resources []proto.Message) []byte {
	r := &discovery.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: fmt.Sprintf("2026-12-01T09:00:00Z/%d", n), Nonce: fmt.Sprintf("nonce-%d-%s", n, typeURL)}
	for _, m := range resources {
		// Deterministic, as the bench's: a resource unchanged between
		// two versions must be the same bytes, map fields included.
		a := new(anypb.Any)
		if err := anypb.MarshalFrom(a, m, proto.MarshalOptions{Deterministic: true}); err != nil {
			b.Fatal(err)
		}
		r.Resources = append(r.Resources, a)
	}
	return marshal(b, r)
}

func benchACK(b testing.TB, typeURL string, n int, names []string) []byte {
	return marshal(b, &discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: fmt.Sprintf("2026-12-01T09:00:00Z/%d", n),
		ResponseNonce: fmt.Sprintf("nonce-%d-%s", n, typeURL), ResourceNames: names})
}

// pieces is bs as gRPC receives a message: in 16 KB buffers.
func pieces(bs []byte) mem.BufferSlice {
	var data mem.BufferSlice
	for len(bs) > 0 {
		n := min(len(bs), 16<<10)
		data = append(data, mem.SliceBuffer(bs[:n]))
		bs = bs[n:]
	}
	return data
}

func request(at time.Time, bs []byte) tap.Frame {
	return tap.Frame{Direction: tap.Request, Time: at, Size: len(bs), Data: mem.BufferSlice{mem.SliceBuffer(bs)}}
}

func response(at time.Time, bs []byte) tap.Frame {
	return tap.Frame{Direction: tap.Response, Time: at, Size: len(bs), Data: pieces(bs)}
}

// BenchmarkObserverFanOut is W6's observation: 1,000 streams synced on a
// CDS of 200 clusters (212 KB), pushed the other of two versions in turn
// (2 % of the clusters changed), each push ACKed once the 999 other streams
// have been pushed, as a control plane's full push reaches a mesh. One op
// is one push and one ACK: decoding, tracking, live log, metrics, spans.
func BenchmarkObserverFanOut(b *testing.B) {
	const streams = 1_000
	var a, v2 []proto.Message
	for i, r := range xdsconfig.Clusters(200, 1000) {
		a = append(a, r)
		if i%50 == 0 {
			c := proto.Clone(r).(*clusterv3.Cluster)
			c.ConnectTimeout = durationpb.New(7 * time.Second)
			r = c
		}
		v2 = append(v2, r)
	}
	p := benchPipeline(b)
	o := p.Tracking()
	at := benchT0
	// The frames are made once: the tracker keeps a push's bytes until its
	// ACK (mem.Buffer.Ref), which costs a SliceBuffer nothing.
	pushes := []tap.Frame{response(at, benchPush(b, codec.TypeCluster, 1, a)), response(at, benchPush(b, codec.TypeCluster, 2, v2))}
	acks := []tap.Frame{request(at, benchACK(b, codec.TypeCluster, 1, nil)), request(at, benchACK(b, codec.TypeCluster, 2, nil))}
	for id := range uint64(streams) {
		o.OnStreamOpen(benchStream(id + 1))
		o.OnFrame(benchStream(id+1), request(at, marshal(b, &discovery.DiscoveryRequest{Node: benchNode(b, int(id)), TypeUrl: codec.TypeCluster})))
	}
	n := 0
	// step pushes stream n the next version and ACKs the push of the
	// stream after it, which went out streams-1 steps ago.
	step := func() {
		id, k := uint64(n%streams), n/streams%2
		n++
		at = at.Add(time.Millisecond)
		f := pushes[k]
		f.Time = at
		o.OnFrame(benchStream(id+1), f)
		if n >= streams {
			f := acks[(n-streams)/streams%2]
			f.Time = at
			o.OnFrame(benchStream(uint64(n%streams)+1), f)
		}
	}
	for range 3 * streams {
		step()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		step()
	}
}

// BenchmarkObserverIdleStreams is W3's and W5's observation as `adstap run`
// ships it: 1,000 streams, each synced with CDS of 100 clusters and EDS of
// the same 100 names, both ACKed, then idle. B/stream is the live heap
// observation holds per stream: the tracker's state and every output's. The streams sync one after the
// other (one-by-one) or step by step together (interleaved), as W3's and a
// mesh's do, where what a sync lets go of lies between what the streams
// keep: B-spans/stream counts the heap's spans in use, holes included.
func BenchmarkObserverIdleStreams(b *testing.B) {
	const streams = 1_000
	clusters := xdsconfig.Clusters(100, 1000)
	var cds, eds []proto.Message
	var names []string
	for _, c := range clusters {
		name := c.(*clusterv3.Cluster).Name
		names = append(names, name)
		cds = append(cds, c)
		eds = append(eds, &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: "10.0.0.1", PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080},
				}}},
			}}}},
		}}})
	}
	type message struct {
		bytes    []byte
		response bool
	}
	script := []message{
		{},
		{bytes: benchPush(b, codec.TypeCluster, 1, cds), response: true},
		{bytes: benchACK(b, codec.TypeCluster, 1, nil)},
		{bytes: marshal(b, &discovery.DiscoveryRequest{TypeUrl: codec.TypeEndpoint, ResourceNames: names})},
		{bytes: benchPush(b, codec.TypeEndpoint, 1, eds), response: true},
		{bytes: benchACK(b, codec.TypeEndpoint, 1, names)},
	}
	initial := make([][]byte, streams)
	for i := range initial {
		initial[i] = marshal(b, &discovery.DiscoveryRequest{Node: benchNode(b, i), TypeUrl: codec.TypeCluster})
	}
	buf := make([]byte, 0, 64<<10)
	// step gives stream id (0-based) message k of the script.
	step := func(o *pipeline.Observer, s tap.StreamInfo, id, k int) {
		f := script[k]
		at := benchT0.Add(time.Duration(k+1) * time.Millisecond)
		bs := f.bytes
		if k == 0 {
			bs = initial[id]
		}
		// A fresh copy for every stream, scribbled over after use as the
		// tap's buffers are reused.
		bs = append(buf[:0], bs...)
		if f.response {
			o.OnFrame(s, response(at, bs))
		} else {
			o.OnFrame(s, request(at, bs))
		}
		for i := range bs {
			bs[i] = 0xff
		}
	}
	for _, interleaved := range []bool{false, true} {
		name := "one-by-one"
		if interleaved {
			name = "interleaved"
		}
		b.Run(name, func(b *testing.B) {
			var perStream, spansPerStream float64
			b.ReportAllocs()
			for b.Loop() {
				var p *pipeline.Pipeline
				var spans [2]runtime.MemStats
				grown := heapbench.Grown(b, func() *pipeline.Pipeline {
					runtime.ReadMemStats(&spans[0]) // after Grown's collection
					p = newShippedPipeline(b)
					o := p.Tracking()
					ss := make([]tap.StreamInfo, streams)
					for id := range streams {
						ss[id] = benchStream(uint64(id) + 1)
					}
					if interleaved {
						for id := range streams {
							o.OnStreamOpen(ss[id])
						}
						for k := range script {
							for id := range streams {
								step(o, ss[id], id, k)
							}
						}
					} else {
						for id := range streams {
							o.OnStreamOpen(ss[id])
							for k := range script {
								step(o, ss[id], id, k)
							}
						}
					}
					o.Tick(benchT0.Add(10 * time.Second))           // settles the full syncs
					p.References.Dangling(context.Background(), "") // the reference check has caught up
					return p
				}, func(p *pipeline.Pipeline) {
					runtime.ReadMemStats(&spans[1]) // after Grown's collection
					if got := len(p.Tracker.Streams("")); got != streams {
						b.Fatalf("%d streams tracked, want %d", got, streams)
					}
				})
				perStream += float64(grown) / streams
				spansPerStream += float64(int64(spans[1].HeapInuse)-int64(spans[0].HeapInuse)) / streams
				b.StopTimer()
				closePipeline(b, p)
				b.StartTimer()
			}
			b.ReportMetric(perStream/float64(b.N), "B/stream")
			b.ReportMetric(spansPerStream/float64(b.N), "B-spans/stream")
		})
	}
}

// BenchmarkObserverLargePush is W7's observation: one sidecar's stream
// synced with a CDS push of 40,000 clusters (40 MB), ACKed, on a fresh
// pipeline configured as `adstap run` ships (its default flags, through
// runconfig.Build), and the reference check's wait for the push. What it
// allocates per op is what observing the push adds to the relay's own
// memory at the push's peak, since no collection runs during a push the
// heap's goal has room for: the decode, the tracker's state, the outputs'.
// B-held is what stays once the push is answered and collected.
func BenchmarkObserverLargePush(b *testing.B) {
	var clusters []proto.Message
	for _, c := range xdsconfig.Clusters(40_000, 940) {
		clusters = append(clusters, c)
	}
	push, ack := benchPush(b, codec.TypeCluster, 1, clusters), benchACK(b, codec.TypeCluster, 1, nil)
	initial := marshal(b, &discovery.DiscoveryRequest{Node: benchNode(b, 0), TypeUrl: codec.TypeCluster})
	var held int64
	b.ReportAllocs()
	for b.Loop() {
		var p *pipeline.Pipeline
		held = heapbench.Grown(b, func() *pipeline.Pipeline {
			p = newShippedPipeline(b)
			o, s, at := p.Tracking(), benchStream(1), benchT0
			o.OnStreamOpen(s)
			o.OnFrame(s, request(at, initial))
			o.OnFrame(s, response(at, push))
			o.OnFrame(s, request(at, ack))
			p.References.Dangling(context.Background(), "")
			return p
		}, nil)
		b.StopTimer()
		closePipeline(b, p)
		b.StartTimer()
	}
	b.ReportMetric(float64(held), "B-held")
}

// BenchmarkRetainPush is the retained configuration's path
// (--retain-resources) for one stream synced on a CDS of 1,000 clusters:
// one op is a push of the other of two versions, its ACK, and
// /debug/config's wait for the store to have applied it (a type the page
// does not hold, so that the page is not rendered). In "2%-changed" one
// cluster in fifty differs between the versions, as in a config change;
// in "all-changed" every cluster does.
func BenchmarkRetainPush(b *testing.B) {
	benchCDSVersions(b, pipeline.Config{Logger: slog.New(slog.DiscardHandler), RetainMaxBytes: 64 << 20}, func(p *pipeline.Pipeline) {
		rec := httptest.NewRecorder()
		p.Pages()["GET /debug/config"].ServeHTTP(rec, httptest.NewRequest("GET", "/debug/config?stream=1&type=none", nil))
		if rec.Code != http.StatusNotFound {
			b.Fatalf("/debug/config?type=none: %d, want 404", rec.Code)
		}
	})
}

// BenchmarkReferencesPush is the reference check's path
// (--check-references), as BenchmarkRetainPush: one op is a push, its ACK,
// and /debug/streams' wait for the check to have applied it.
func BenchmarkReferencesPush(b *testing.B) {
	benchCDSVersions(b, pipeline.Config{Logger: slog.New(slog.DiscardHandler), CheckReferences: true}, func(p *pipeline.Pipeline) {
		p.References.Dangling(context.Background(), "")
	})
}

// benchCDSVersions runs, on a pipeline made with cfg, one stream synced on a
// CDS of 1,000 clusters: one op is a push of the other of two versions, its
// ACK, and wait for the output's work. In "2%-changed" one cluster in fifty
// differs between the versions, as in a config change; in "all-changed"
// every cluster does.
func benchCDSVersions(b *testing.B, cfg pipeline.Config, wait func(*pipeline.Pipeline)) {
	for _, bc := range []struct {
		name  string
		every int // one cluster in every changes
	}{{"2%-changed", 50}, {"all-changed", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			var v1, v2 []proto.Message
			for i, r := range xdsconfig.Clusters(1000, 1000) {
				v1 = append(v1, r)
				if i%bc.every == 0 {
					c := proto.Clone(r).(*clusterv3.Cluster)
					c.ConnectTimeout = durationpb.New(7 * time.Second)
					r = c
				}
				v2 = append(v2, r)
			}
			p, err := pipeline.NewUnstarted(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { closePipeline(b, p) })
			o, s, at := p.TapObserver(), benchStream(1), benchT0
			pushes := [][]byte{benchPush(b, codec.TypeCluster, 1, v1), benchPush(b, codec.TypeCluster, 2, v2)}
			acks := [][]byte{benchACK(b, codec.TypeCluster, 1, nil), benchACK(b, codec.TypeCluster, 2, nil)}
			o.OnStreamOpen(s)
			o.OnFrame(s, request(at, marshal(b, &discovery.DiscoveryRequest{Node: benchNode(b, 0), TypeUrl: codec.TypeCluster})))
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				at = at.Add(time.Millisecond)
				o.OnFrame(s, response(at, pushes[n%2]))
				o.OnFrame(s, request(at, acks[n%2]))
				n++
				wait(p)
			}
		})
	}
}

// BenchmarkReferencesFanOut is W6 through the pipeline as `adstap run`
// ships it (the reference check on, tracing off): one op is one push of a
// CDS of 200 clusters (212 KB) to 1,000 streams and their 1,000 ACKs, and
// the check's wait for all of them. In "sync" each op opens 1,000 new
// streams, which receive their first push (every resource new) and close;
// in "change" 1,000 synced streams are pushed the other of two versions
// (2 % of the clusters changed). not-kept/op is the pushes the tracker could
// not keep within --nack-keep-bytes (so neither name a NACK's resources nor
// be checked), scanned/op the resources the check scanned: the same bytes
// sent to 1,000 streams are kept once and scanned once.
func BenchmarkReferencesFanOut(b *testing.B) {
	const streams = 1_000
	var v1, v2 []proto.Message
	for i, r := range xdsconfig.Clusters(200, 1000) {
		v1 = append(v1, r)
		if i%50 == 0 {
			c := proto.Clone(r).(*clusterv3.Cluster)
			c.ConnectTimeout = durationpb.New(7 * time.Second)
			r = c
		}
		v2 = append(v2, r)
	}
	for _, sync := range []bool{true, false} {
		name := "change"
		if sync {
			name = "sync"
		}
		b.Run(name, func(b *testing.B) {
			p, err := pipeline.NewUnstarted(pipeline.Config{Logger: slog.New(export.NewPretty(io.Discard, slog.LevelInfo)),
				Version: "bench", CheckReferences: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { closePipeline(b, p) })
			o, at := p.TapObserver(), benchT0
			pushes := []tap.Frame{response(at, benchPush(b, codec.TypeCluster, 1, v1)), response(at, benchPush(b, codec.TypeCluster, 2, v2))}
			acks := []tap.Frame{request(at, benchACK(b, codec.TypeCluster, 1, nil)), request(at, benchACK(b, codec.TypeCluster, 2, nil))}
			next := uint64(1)
			open := func() {
				for id := next; id < next+streams; id++ {
					o.OnStreamOpen(benchStream(id))
					o.OnFrame(benchStream(id), request(at, marshal(b, &discovery.DiscoveryRequest{Node: benchNode(b, int(id)), TypeUrl: codec.TypeCluster})))
				}
			}
			fanOut := func(k int) {
				at = at.Add(time.Millisecond)
				for id := next; id < next+streams; id++ {
					f := pushes[k]
					f.Time = at
					o.OnFrame(benchStream(id), f)
				}
				for id := next; id < next+streams; id++ {
					f := acks[k]
					f.Time = at
					o.OnFrame(benchStream(id), f)
				}
				p.References.Dangling(context.Background(), "")
			}
			open()
			if !sync {
				fanOut(0)
			}
			skipped, shared0, scanned0 := p.Tracker.Kept().Skipped, uint64(0), uint64(0)
			shared0, scanned0 = p.References.ScanStats()
			n := 1
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if sync {
					fanOut(0)
					for id := next; id < next+streams; id++ {
						o.OnStreamClose(benchStream(id), tap.StreamEnd{Time: at})
					}
					next += streams
					open()
					continue
				}
				fanOut(n % 2)
				n++
			}
			b.StopTimer()
			shared, scanned := p.References.ScanStats()
			b.ReportMetric(float64(p.Tracker.Kept().Skipped-skipped)/float64(b.N), "not-kept/op")
			b.ReportMetric(float64(scanned-scanned0)/float64(b.N), "scanned/op")
			b.ReportMetric(float64(shared-shared0)/float64(b.N), "shared/op")
		})
	}
}

// BenchmarkObserverSmallEDS is W2's observation as `adstap run` ships it:
// 200 streams, each subscribed to one cluster, receive a 1 KB
// ClusterLoadAssignment in turn and ACK it. One op is one push and its ACK;
// B/op is the garbage a push leaves, which sets how often the collector
// runs while the relay forwards frames (W2's tail). "lean" is the same with
// every optional output off, for what the defaults add.
func BenchmarkObserverSmallEDS(b *testing.B) {
	const streams = 200
	for _, shipped := range []bool{true, false} {
		name := "shipped"
		if !shipped {
			name = "lean"
		}
		b.Run(name, func(b *testing.B) {
			var p *pipeline.Pipeline
			if shipped {
				p = newShippedPipeline(b)
			} else {
				p = newLeanPipeline(b)
			}
			b.Cleanup(func() { closePipeline(b, p) })
			o, at := p.Tracking(), benchT0
			var pushes [streams][2]tap.Frame
			var acks [streams][2]tap.Frame
			for id := range streams {
				s, cluster := benchStream(uint64(id)+1), fmt.Sprintf("outbound|8080||svc-%05d.ns-%d.svc.cluster.local", id, id%17)
				o.OnStreamOpen(s)
				o.OnFrame(s, request(at, marshal(b, &discovery.DiscoveryRequest{Node: benchNode(b, id), TypeUrl: codec.TypeEndpoint, ResourceNames: []string{cluster}})))
				for v := range 2 {
					pushes[id][v] = response(at, benchPush(b, codec.TypeEndpoint, v+1, []proto.Message{smallAssignment(cluster, id, v)}))
					acks[id][v] = request(at, benchACK(b, codec.TypeEndpoint, v+1, []string{cluster}))
				}
			}
			n := 0
			step := func() {
				id, v := n%streams, n/streams%2
				n++
				at = at.Add(500 * time.Microsecond)
				s := benchStream(uint64(id) + 1)
				f := pushes[id][v]
				f.Time = at
				o.OnFrame(s, f)
				f = acks[id][v]
				f.Time = at.Add(200 * time.Microsecond)
				o.OnFrame(s, f)
			}
			for range 2 * streams {
				step()
			}
			if p.References != nil {
				p.References.Dangling(context.Background(), "")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				step()
			}
			if p.References != nil {
				p.References.Dangling(context.Background(), "")
			}
		})
	}
}

// smallAssignment is cluster's endpoints in version v: ten of them, about 1 KB.
func smallAssignment(cluster string, id, v int) *endpointv3.ClusterLoadAssignment {
	la := &endpointv3.ClusterLoadAssignment{ClusterName: cluster, Endpoints: []*endpointv3.LocalityLbEndpoints{{
		Locality: &core.Locality{Region: "bench", Zone: "bench-a"},
	}}}
	for i := range 10 {
		la.Endpoints[0].LbEndpoints = append(la.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
					Address: fmt.Sprintf("10.%d.%d.%d", id>>8&255, id&255, 10*v+i+1), PortSpecifier: &core.SocketAddress_PortValue{PortValue: 8080},
				}}},
			}},
			HealthStatus: core.HealthStatus_HEALTHY,
		})
	}
	return la
}
