package track_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/heapbench"
	"github.com/adstap/adstap/track"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The benchmarks decode every frame once, outside the timed loop, so they
// measure the tracker and not the codec (codec.BenchmarkDecodeCDS10MB does).

// meshClusters are Istio-shaped cluster names, as every sidecar of a mesh
// receives them.
func meshClusters(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("outbound|8080||svc-%05d.ns-%03d.svc.cluster.local", i, i%100)
	}
	return out
}

// decodedRequest decodes a request as the observer would.
func decodedRequest(tb testing.TB, m proto.Message) *codec.Request {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	_, delta := m.(*discoveryv3.DeltaDiscoveryRequest)
	req, err := codec.DecodeRequest(b, delta)
	if err != nil {
		tb.Fatal(err)
	}
	return req
}

// decodedDelta decodes a Delta response into a codec.Response of its own.
func decodedDelta(tb testing.TB, m proto.Message) *codec.Response {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	resp := new(codec.Response)
	if err := resp.Decode(b, true); err != nil {
		tb.Fatal(err)
	}
	return resp
}

// pushCycle is the benchmarks' loop: pushes alternate, each answered by its
// ACK, a push every 15 ms as in W1.
type pushCycle struct {
	tr      *track.Tracker
	pushes  []*codec.Response
	answers []*codec.Request
	at      time.Time
	n       int
	// data, when set, are the pushes' bytes, which the tracker then keeps
	// until their ACK (Tracker.ResponseFrame), as the tap's observer has it.
	data []mem.BufferSlice
}

func (c *pushCycle) next() {
	i := c.n % len(c.pushes)
	c.n++
	c.at = c.at.Add(15 * time.Millisecond)
	if c.data != nil {
		c.tr.ResponseFrame(1, c.at, c.pushes[i], 1000, c.data[i])
	} else {
		c.tr.Response(1, c.at, c.pushes[i], 1000)
	}
	c.tr.Request(1, c.at, c.answers[i], 100)
}

func (c *pushCycle) bench(b *testing.B, resources int) {
	for range 2 * len(c.pushes) {
		c.next() // the acknowledged state and the scratch slices reach their steady size
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		c.next()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(resources), "ns/resource")
}

// sotwCycle is a stream subscribed to typeURL (wildcard when subscribe is
// empty) that is pushed a and b in turn.
func sotwCycle(tb testing.TB, typeURL string, subscribe []string, a, b []proto.Message) *pushCycle {
	tr := track.New(track.Config{})
	tr.OpenStream(track.StreamMeta{ID: 1, Method: adsSotW, OpenedAt: t0})
	tr.Request(1, t0, decodedRequest(tb, withNode(initial(typeURL, subscribe...), sidecar)), 100)
	return &pushCycle{
		tr:      tr,
		pushes:  []*codec.Response{decodedPush(tb, push(typeURL, 1, a...)), decodedPush(tb, push(typeURL, 2, b...))},
		answers: []*codec.Request{decodedRequest(tb, ack(typeURL, 1, subscribe...)), decodedRequest(tb, ack(typeURL, 2, subscribe...))},
		at:      t0,
	}
}

// w1Bodies are W1's two CDS bodies: the same 10,000 clusters in the same
// order, 2 % of them changed in the second.
func w1Bodies(names []string) (a, b []proto.Message) {
	for i, name := range names {
		a = append(a, cluster(name))
		if i%50 == 0 {
			b = append(b, clusterV2(name))
		} else {
			b = append(b, cluster(name))
		}
	}
	return a, b
}

// BenchmarkTrackCDSPush10k is W1 without the relay and the codec: a SotW
// CDS push of 10,000 clusters and its ACK, alternating between two bodies
// that differ in 2 % of the clusters. One op is one push and its ACK.
func BenchmarkTrackCDSPush10k(b *testing.B) {
	a, v2 := w1Bodies(meshClusters(10_000))
	sotwCycle(b, cds, nil, a, v2).bench(b, 10_000)
}

// BenchmarkTrackCDSPush10kKept is BenchmarkTrackCDSPush10k with each push's
// bytes given to the tracker, in the 16 KB pooled buffers gRPC receives a
// message in: the cost of keeping, until the ACK, what a NACK needs to name
// what it rejected. With 2 % of the clusters changed, that is a copy of
// those (a compact response of 200 clusters) rather than a reference to the
// 10,000: a walk over the push and the copy. Compare the two in one run.
func BenchmarkTrackCDSPush10kKept(b *testing.B) {
	a, v2 := w1Bodies(meshClusters(10_000))
	c := sotwCycle(b, cds, nil, a, v2)
	for _, m := range []*discoveryv3.DiscoveryResponse{push(cds, 1, a...), push(cds, 2, v2...)} {
		raw, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		var data mem.BufferSlice
		for len(raw) > 0 {
			n := min(len(raw), 16<<10)
			data = append(data, mem.Copy(raw[:n], mem.DefaultBufferPool()))
			raw = raw[n:]
		}
		defer data.Free()
		c.data = append(c.data, data)
	}
	c.bench(b, 10_000)
}

// BenchmarkTrackCDSPush10kShuffled is the same with each push listing the
// clusters in an order of its own, as a control plane iterating a map would.
func BenchmarkTrackCDSPush10kShuffled(b *testing.B) {
	a, v2 := w1Bodies(meshClusters(10_000))
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(a), func(i, j int) { a[i], a[j] = a[j], a[i] })
	r.Shuffle(len(v2), func(i, j int) { v2[i], v2[j] = v2[j], v2[i] })
	sotwCycle(b, cds, nil, a, v2).bench(b, 10_000)
}

// BenchmarkTrackEDSPush10k is a SotW EDS push of 10,000 explicitly
// subscribed names, which also exercises the subscription.
func BenchmarkTrackEDSPush10k(b *testing.B) {
	names := meshClusters(10_000)
	var a, v2 []proto.Message
	for i, name := range names {
		a = append(a, endpoint(name, "10.0.0.1"))
		if i%50 == 0 {
			v2 = append(v2, endpoint(name, "10.0.0.2"))
		} else {
			v2 = append(v2, endpoint(name, "10.0.0.1"))
		}
	}
	sotwCycle(b, eds, names, a, v2).bench(b, 10_000)
}

// BenchmarkTrackDeltaEDSPush is W4: a Delta stream subscribed to 5,000
// names, each push updating 50 of them. Its cost must follow the push, not
// the state.
func BenchmarkTrackDeltaEDSPush(b *testing.B) {
	const subscribed, updated, pushes = 5_000, 50, 20
	names := meshClusters(subscribed)
	tr := track.New(track.Config{})
	tr.OpenStream(track.StreamMeta{ID: 1, Method: adsDelta, OpenedAt: t0})
	tr.Request(1, t0, decodedRequest(b, dinitialNode(eds, sidecar, names...)), 100)
	var all []proto.Message
	for _, name := range names {
		all = append(all, endpoint(name, "10.0.0.1"))
	}
	tr.Response(1, t0, decodedDelta(b, dpush(eds, 1, nil, all...)), 1000)
	tr.Request(1, t0, decodedRequest(b, dack(eds, 1)), 100)
	c := &pushCycle{tr: tr, at: t0}
	for n := range pushes {
		var res []proto.Message
		for i := range updated {
			name := names[(n*updated+i)%subscribed]
			res = append(res, endpoint(name, fmt.Sprintf("10.1.%d.%d", n, i)))
		}
		c.pushes = append(c.pushes, decodedDelta(b, dpush(eds, n+2, nil, res...)))
		c.answers = append(c.answers, decodedRequest(b, dack(eds, n+2)))
	}
	c.bench(b, updated)
}

// BenchmarkTrackIdleStreams is W3's tracker share: 1,000 streams, each
// synced with CDS of 100 clusters and EDS of the same 100 names, both ACKed,
// then idle. Every stream decodes its frames from bytes of its own, as the
// tap does, so nothing is shared between streams unless the tracker shares
// it. B/stream is the live heap each stream holds, with each resource
// followed (Config.Resources, as adstap run ships) and without.
func BenchmarkTrackIdleStreams(b *testing.B) {
	const streams, resources = 1_000, 100
	names := meshClusters(resources)
	var clusters, endpoints []proto.Message
	for _, name := range names {
		clusters = append(clusters, cluster(name))
		endpoints = append(endpoints, endpoint(name, "10.0.0.1"))
	}
	marshal := func(m proto.Message) []byte {
		bs, err := proto.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		return bs
	}
	type message struct {
		bytes    []byte
		response bool
	}
	script := []message{
		{bytes: marshal(withNode(initial(cds), sidecar))},
		{bytes: marshal(push(cds, 1, clusters...)), response: true},
		{bytes: marshal(ack(cds, 1))},
		{bytes: marshal(initial(eds, names...))},
		{bytes: marshal(push(eds, 2, endpoints...)), response: true},
		{bytes: marshal(ack(eds, 2, names...))},
	}
	var resp codec.Response
	buf := make([]byte, 0, 64<<10)
	syncStream := func(tr *track.Tracker, id uint64) {
		at := t0
		tr.OpenStream(track.StreamMeta{ID: id, Method: adsSotW, OpenedAt: at})
		for _, f := range script {
			at = at.Add(ms)
			// A fresh copy for every stream, scribbled over after use as
			// the tap's buffers are reused.
			bs := append(buf[:0], f.bytes...)
			if f.response {
				if err := resp.Decode(bs, false); err != nil {
					b.Fatal(err)
				}
				tr.Response(id, at, &resp, len(bs))
				resp.Reset()
			} else {
				req, err := codec.DecodeRequest(bs, false)
				if err != nil {
					b.Fatal(err)
				}
				tr.Request(id, at, req, len(bs))
			}
			for i := range bs {
				bs[i] = 0xff
			}
		}
		tr.Tick(at.Add(10 * time.Second)) // settles the full sync
	}
	for _, bc := range []struct {
		name string
		cfg  track.Config
	}{
		// As adstap run ships it: each resource followed for CSDS.
		{"resources", track.Config{Resources: true}},
		{"types-only", track.Config{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var perStream float64
			b.ReportAllocs()
			for b.Loop() {
				grown := heapbench.Grown(b, func() *track.Tracker {
					tr := track.New(bc.cfg)
					for id := range uint64(streams) {
						syncStream(tr, id+1)
					}
					return tr
				}, func(tr *track.Tracker) {
					if got := len(tr.Streams("")); got != streams {
						b.Fatalf("%d streams tracked, want %d", got, streams)
					}
				})
				perStream += float64(grown) / streams
			}
			b.ReportMetric(perStream/float64(b.N), "B/stream")
		})
	}
}

// BenchmarkTrackFanOut is W6's tracker share: 1,000 streams synced on a CDS
// of 200 clusters, pushed the other of two bodies in turn (2 % of the
// clusters changed), each push answered once the 999 other streams have
// been pushed, as a control plane's full push reaches a mesh. One op is one
// push and one ACK. Unlike BenchmarkTrackCDSPush10k's single stream, a
// stream here is pushed once in a thousand ops, like the sidecars of a mesh.
func BenchmarkTrackFanOut(b *testing.B) {
	const streams, resources = 1_000, 200
	a, v2 := w1Bodies(meshClusters(resources))
	tr := track.New(track.Config{})
	pushes := []*codec.Response{decodedPush(b, push(cds, 1, a...)), decodedPush(b, push(cds, 2, v2...))}
	answers := []*codec.Request{decodedRequest(b, ack(cds, 1)), decodedRequest(b, ack(cds, 2))}
	first := decodedRequest(b, withNode(initial(cds), sidecar))
	for id := range uint64(streams) {
		tr.OpenStream(track.StreamMeta{ID: id + 1, Method: adsSotW, OpenedAt: t0})
		tr.Request(id+1, t0, first, 100)
	}
	at, n := t0, 0
	// step pushes stream n the next body and ACKs the push of the stream
	// after it, which went out streams-1 steps ago.
	step := func() (acked bool) {
		id, k := uint64(n%streams), n/streams%2
		n++
		at = at.Add(ms)
		tr.Response(id+1, at, pushes[k], 212_000)
		if n < streams {
			return true
		}
		next := uint64(n % streams)
		for _, e := range tr.Request(next+1, at, answers[(n-streams)/streams%2], 100) {
			if e, ok := e.(track.PushEnded); ok && e.Result == track.ResultACK {
				return true
			}
		}
		return false
	}
	for range 3 * streams {
		if !step() {
			b.Fatal("a push went unacknowledged")
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		step()
	}
}
