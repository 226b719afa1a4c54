package codec_test

import (
	"fmt"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
)

// cdsPush is a SotW CDS response of n Istio-like clusters.
func cdsPush(tb testing.TB, n int) []byte {
	tb.Helper()
	resp := &discoveryv3.DiscoveryResponse{
		VersionInfo:  "2021-08-09T16:20:50Z/257",
		TypeUrl:      codec.TypeCluster,
		Nonce:        "2021-08-09T16:20:50Z/2576d7b4b1c-5e43-4f4b-9b0b-0c4f3e1a2f10",
		ControlPlane: &corev3.ControlPlane{Identifier: "istiod-7d4f9c8b6-x2x9z"},
	}
	for i := range n {
		resp.Resources = append(resp.Resources, mustAny(istioCluster(i)))
	}
	return marshal(tb, resp)
}

// deltaCDSPush is the same push in Delta form.
func deltaCDSPush(tb testing.TB, n int) []byte {
	tb.Helper()
	resp := &discoveryv3.DeltaDiscoveryResponse{
		SystemVersionInfo: "2021-08-09T16:20:50Z/257",
		TypeUrl:           codec.TypeCluster,
		Nonce:             "2021-08-09T16:20:50Z/2576d7b4b1c-5e43-4f4b-9b0b-0c4f3e1a2f10",
		ControlPlane:      &corev3.ControlPlane{Identifier: "istiod-7d4f9c8b6-x2x9z"},
	}
	for i := range n {
		c := istioCluster(i)
		resp.Resources = append(resp.Resources, &discoveryv3.Resource{
			Name: c.Name, Version: "2021-08-09T16:20:50Z/257", Resource: mustAny(c),
		})
	}
	return marshal(tb, resp)
}

func BenchmarkDecodeCDS10MB(b *testing.B) {
	in := cdsPush(b, 10_000)
	var r codec.Response
	if err := r.Decode(in, false); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Decode(in, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(in))/float64(len(r.Resources)), "B/resource")
}

// grpcSegments cuts a message as gRPC hands it over: one buffer per HTTP/2
// DATA frame of 16 KB, the first shorter by the 5-byte message header.
func grpcSegments(b []byte) [][]byte {
	var segs [][]byte
	for n := 16<<10 - 5; len(b) > 0; n = 16 << 10 {
		n = min(n, len(b))
		segs = append(segs, b[:n:n])
		b = b[n:]
	}
	return segs
}

func BenchmarkDecodeCDS10MBSegments(b *testing.B) {
	in := cdsPush(b, 10_000)
	segs := grpcSegments(in)
	var r codec.Response
	// The first decode grows the scratch space chunk by chunk, the second
	// replaces the chunks with one: steady state starts at the third.
	for range 2 {
		if err := r.DecodeSegments(segs, false); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.DecodeSegments(segs, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(segs)), "segments")
}

// BenchmarkDecodeCDS10MBBuffers is the call the tracker makes with what
// gRPC gives it.
func BenchmarkDecodeCDS10MBBuffers(b *testing.B) {
	in := cdsPush(b, 10_000)
	var data mem.BufferSlice
	for _, s := range grpcSegments(in) {
		data = append(data, mem.SliceBuffer(s))
	}
	var r codec.Response
	for range 2 {
		if err := r.DecodeBuffers(data, false); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.DecodeBuffers(data, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCDS10MBCopy is what DecodeSegments replaces: the segments
// copied into one pooled buffer, as the pipeline's observer did, then Decode.
func BenchmarkDecodeCDS10MBCopy(b *testing.B) {
	in := cdsPush(b, 10_000)
	var data mem.BufferSlice
	for _, s := range grpcSegments(in) {
		data = append(data, mem.SliceBuffer(s))
	}
	var r codec.Response
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		if err := r.Decode(buf.ReadOnlyData(), false); err != nil {
			b.Fatal(err)
		}
		r.Reset()
		buf.Free()
	}
}

func BenchmarkDecodeDeltaCDS10MB(b *testing.B) {
	in := deltaCDSPush(b, 10_000)
	var r codec.Response
	if err := r.Decode(in, true); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Decode(in, true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	in := marshal(b, &discoveryv3.DiscoveryRequest{
		VersionInfo:   "2021-08-09T16:20:50Z/257",
		ResourceNames: []string{"outbound|8080||a.default.svc.cluster.local", "outbound|9080||b.default.svc.cluster.local"},
		TypeUrl:       codec.TypeEndpoint,
		ResponseNonce: "2021-08-09T16:20:50Z/2576d7b4b1c-5e43-4f4b-9b0b-0c4f3e1a2f10",
	})
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := codec.DecodeRequest(in, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFreshResponse is W6's push (200 clusters, in gRPC's 16 KB
// buffers) decoded into a Response fresh from its pool, as when the
// collector has emptied the pool: what a decode allocates before the
// Response is warm.
func BenchmarkDecodeFreshResponse(b *testing.B) {
	in := cdsPush(b, 200)
	var data mem.BufferSlice
	for _, s := range grpcSegments(in) {
		data = append(data, mem.SliceBuffer(s))
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := new(codec.Response).DecodeBuffers(data, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRequestEDS is a sidecar's EDS request, which names every
// cluster it has (here 100), as its first request and every ACK repeat.
func BenchmarkDecodeRequestEDS(b *testing.B) {
	req := &discoveryv3.DiscoveryRequest{
		VersionInfo:   "2021-08-09T16:20:50Z/257",
		TypeUrl:       codec.TypeEndpoint,
		ResponseNonce: "2021-08-09T16:20:50Z/2576d7b4b1c-5e43-4f4b-9b0b-0c4f3e1a2f10",
	}
	for i := range 100 {
		req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("outbound|8080||svc-%05d.ns-%d.svc.cluster.local", i, i%17))
	}
	in := marshal(b, req)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := codec.DecodeRequest(in, false); err != nil {
			b.Fatal(err)
		}
	}
}

// A fresh Response grows its list of resources once, to the push's size,
// rather than doubling it from one: as many allocations for 10,000
// resources as for 10, in one piece or in gRPC's segments.
func TestFreshResponseGrowsOnce(t *testing.T) {
	leakcheck.Check(t)
	small, large := cdsPush(t, 10), cdsPush(t, 10_000)
	for _, tt := range []struct {
		name   string
		decode func(in []byte) error
	}{
		{"Decode", func(in []byte) error { return new(codec.Response).Decode(in, false) }},
		{"DecodeSegments", func(in []byte) error {
			// Segments of the message's own size: no field straddles
			// two, so the scratch space for those plays no part.
			return new(codec.Response).DecodeSegments([][]byte{in[:len(in)/2], in[len(in)/2:]}, false)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			allocs := func(in []byte) float64 {
				return testing.AllocsPerRun(5, func() {
					if err := tt.decode(in); err != nil {
						t.Fatal(err)
					}
				})
			}
			if s, l := allocs(small), allocs(large); s != l {
				t.Errorf("allocations of a fresh Response: %v for 10 resources, %v for 10,000: want as many", s, l)
			}
		})
	}
}

// A reused Response decodes a push of any size with the same few allocations
// (the version and nonce strings), none per resource, whether it is read in
// one piece or in gRPC's segments.
func TestResponseDecodeDoesNotAllocatePerResource(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name  string
		delta bool
		push  func(testing.TB, int) []byte
	}{
		{"SotW", false, cdsPush},
		{"Delta", true, deltaCDSPush},
		{"SotW TTL wrappers", false, func(tb testing.TB, n int) []byte {
			resp := &discoveryv3.DiscoveryResponse{TypeUrl: codec.TypeCluster, VersionInfo: "v", Nonce: "n"}
			for i := range n {
				c := istioCluster(i)
				resp.Resources = append(resp.Resources, mustAny(&discoveryv3.Resource{Name: c.Name, Version: "v", Resource: mustAny(c)}))
			}
			return marshal(tb, resp)
		}},
	}
	methods := []struct {
		name   string
		decode func(r *codec.Response, in []byte, delta bool) func() error
	}{
		{"Decode", func(r *codec.Response, in []byte, delta bool) func() error {
			return func() error { return r.Decode(in, delta) }
		}},
		{"DecodeSegments", func(r *codec.Response, in []byte, delta bool) func() error {
			segs := grpcSegments(in)
			return func() error { return r.DecodeSegments(segs, delta) }
		}},
		{"DecodeBuffers", func(r *codec.Response, in []byte, delta bool) func() error {
			var data mem.BufferSlice
			for _, s := range grpcSegments(in) {
				data = append(data, mem.SliceBuffer(s))
			}
			return func() error { return r.DecodeBuffers(data, delta) }
		}},
	}
	for _, tt := range tests {
		smallPush, largePush := tt.push(t, 10), tt.push(t, 10_000)
		for _, m := range methods {
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				var r codec.Response
				decode := func(in []byte, want int) func() {
					decode := m.decode(&r, in, tt.delta)
					return func() {
						if err := decode(); err != nil {
							t.Fatal(err)
						}
						if len(r.Resources) != want {
							t.Fatalf("decoded %d resources, want %d", len(r.Resources), want)
						}
					}
				}
				small, large := decode(smallPush, 10), decode(largePush, 10_000)
				// Grow r's slices and scratch space once; after that the
				// size of a push must not matter.
				large()
				smallAllocs := testing.AllocsPerRun(20, small)
				largeAllocs := testing.AllocsPerRun(5, large)
				if largeAllocs != smallAllocs {
					t.Errorf("allocations: %v with 10 resources, %v with 10,000: %s allocates per resource", smallAllocs, largeAllocs, m.name)
				}
				// version_info and nonce; the type URL and control plane are reused.
				if smallAllocs > 2 {
					t.Errorf("allocations per %s: %v, want at most 2", m.name, smallAllocs)
				}
			})
		}
	}
}

// BenchmarkShortType names the types that fill almost every push, and one
// it does not know.
func BenchmarkShortType(b *testing.B) {
	urls := []string{codec.TypeCluster, codec.TypeEndpoint, codec.TypeListener, codec.TypeRoute, codec.TypeSecret, codec.TypeAuthorization, "type.googleapis.com/my.Unknown"}
	for b.Loop() {
		for _, u := range urls {
			if codec.ShortType(u) == "" {
				b.Fatal("no short type")
			}
		}
	}
}
