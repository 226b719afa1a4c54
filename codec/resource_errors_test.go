package codec_test

import (
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// A control plane's per-resource errors (resource_errors, field 7 of a
// DiscoveryResponse, 9 of a DeltaDiscoveryResponse) are read, in one piece
// and split across segments alike.
func TestResponseResourceErrors(t *testing.T) {
	leakcheck.Check(t)
	errs := []*discoveryv3.ResourceError{
		{ResourceName: &discoveryv3.ResourceName{Name: "outbound|80||a"}, ErrorDetail: &rpcstatus.Status{Code: 5, Message: "no such service"}},
		{ResourceName: &discoveryv3.ResourceName{Name: "b"}, ErrorDetail: &rpcstatus.Status{Code: 7, Message: "denied"}},
	}
	want := []codec.ResourceError{
		{Name: "outbound|80||a", Error: codec.ErrorDetail{Code: 5, Message: "no such service"}},
		{Name: "b", Error: codec.ErrorDetail{Code: 7, Message: "denied"}},
	}
	tests := []struct {
		name  string
		delta bool
		in    proto.Message
	}{
		{"SotW", false, &discoveryv3.DiscoveryResponse{TypeUrl: codec.TypeCluster, Nonce: "n", ResourceErrors: errs}},
		{"Delta", true, &discoveryv3.DeltaDiscoveryResponse{TypeUrl: codec.TypeCluster, Nonce: "n", ResourceErrors: errs}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			var r codec.Response
			if err := r.Decode(b, tt.delta); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, r.ResourceErrors); diff != "" {
				t.Errorf("Decode: resource errors (-want +got):\n%s", diff)
			}
			var segs mem.BufferSlice
			for i := 0; i < len(b); i += 7 {
				segs = append(segs, mem.SliceBuffer(b[i:min(i+7, len(b))]))
			}
			var s codec.Response
			if err := s.DecodeBuffers(segs, tt.delta); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, s.ResourceErrors); diff != "" {
				t.Errorf("DecodeBuffers: resource errors (-want +got):\n%s", diff)
			}
			r.Reset()
			if len(r.ResourceErrors) != 0 {
				t.Errorf("after Reset: %d resource errors", len(r.ResourceErrors))
			}
		})
	}
}
