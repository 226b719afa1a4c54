package codec_test

import (
	"testing"

	"github.com/adstap/adstap/codec"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
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

// A reused Response decodes a push of any size with the same few allocations
// (the version and nonce strings), none per resource.
func TestResponseDecodeDoesNotAllocatePerResource(t *testing.T) {
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			small, large := tt.push(t, 10), tt.push(t, 10_000)
			var r codec.Response
			decode := func(in []byte, want int) func() {
				return func() {
					if err := r.Decode(in, tt.delta); err != nil {
						t.Fatal(err)
					}
					if len(r.Resources) != want {
						t.Fatalf("decoded %d resources, want %d", len(r.Resources), want)
					}
				}
			}
			// Grow r's slices once; after that the size of a push must not matter.
			decode(large, 10_000)()
			smallAllocs := testing.AllocsPerRun(20, decode(small, 10))
			largeAllocs := testing.AllocsPerRun(5, decode(large, 10_000))
			if largeAllocs != smallAllocs {
				t.Errorf("allocations: %v with 10 resources, %v with 10,000: Decode allocates per resource", smallAllocs, largeAllocs)
			}
			// version_info and nonce; the type URL and control plane are reused.
			if smallAllocs > 2 {
				t.Errorf("allocations per Decode: %v, want at most 2", smallAllocs)
			}
		})
	}
}
