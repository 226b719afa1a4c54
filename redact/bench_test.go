package redact_test

import (
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/redact"
)

// BenchmarkRedactPush redacts a 40 MB CDS push (40,000 clusters, istiod's
// largest push-size bucket) with inline TLS keys in four clusters, the way
// adstap did (typed: decode every resource, walk it, encode it all again)
// and the way it does (scan: the wire form, in 16 KB pieces as gRPC
// receives them). Side by side in one run:
//
//	go test -run '^$' -bench RedactPush -benchmem ./redact/
func BenchmarkRedactPush(b *testing.B) {
	kp := xdstest.NewCA(b).Issue(b, "workload", nil, nil, false)
	resources := xdsconfig.KeyedClusters(40_000, 1_000, []int{5_000, 15_000, 25_000, 35_000}, kp.CertPEM, kp.KeyPEM)
	push := xdstest.MustMarshal(&discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: codec.TypeCluster, Nonce: "1", Resources: resources})
	segs := xdstest.Chunk(push, 16<<10)
	b.Logf("push: %d bytes, %d clusters, %d pieces", len(push), len(resources), len(segs))

	b.Run("typed", func(b *testing.B) {
		b.SetBytes(int64(len(push)))
		b.ReportAllocs()
		for b.Loop() {
			if _, redacted, err := typedResponse(push, false); err != nil || !redacted {
				b.Fatal(redacted, err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(push)))
		b.ReportAllocs()
		var s redact.Scanner
		var pieces [][]byte
		for b.Loop() {
			r, err := s.Response(segs, false)
			if err != nil || !r.Redacted() {
				b.Fatal(r.Redacted(), err)
			}
			pieces = r.AppendPieces(pieces[:0], segs)
		}
	})
}
