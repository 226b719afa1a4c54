package redact_test

import (
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
)

// TestIstioAmbientTypes: ztunnel's Address and Authorization decode from
// Istio's own descriptors, and render as JSON with their field names.
func TestIstioAmbientTypes(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range []struct {
		typeURL string
		fill    func(m protoreflect.Message)
		want    string
	}{
		{codec.TypeAddress, func(m protoreflect.Message) {
			w := m.Mutable(m.Descriptor().Fields().ByName("workload")).Message()
			w.Set(w.Descriptor().Fields().ByName("name"), protoreflect.ValueOfString("reviews-v1-7f9c"))
			w.Set(w.Descriptor().Fields().ByName("namespace"), protoreflect.ValueOfString("bookinfo"))
		}, `"workload":{"name":"reviews-v1-7f9c","namespace":"bookinfo"}`},
		{codec.TypeAuthorization, func(m protoreflect.Message) {
			m.Set(m.Descriptor().Fields().ByName("name"), protoreflect.ValueOfString("allow-reviews"))
			m.Set(m.Descriptor().Fields().ByName("namespace"), protoreflect.ValueOfString("bookinfo"))
		}, `"name":"allow-reviews","namespace":"bookinfo"`},
	} {
		mt, err := redact.Types.FindMessageByURL(tt.typeURL)
		if err != nil {
			t.Fatalf("%s: %v", tt.typeURL, err)
		}
		m := dynamicpb.NewMessage(mt.Descriptor())
		tt.fill(m)
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := anypb.UnmarshalNew(&anypb.Any{TypeUrl: tt.typeURL, Value: b}, proto.UnmarshalOptions{Resolver: redact.Types})
		if err != nil {
			t.Fatalf("%s: %v", tt.typeURL, err)
		}
		out, err := protojson.MarshalOptions{Resolver: redact.Types}.Marshal(decoded)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.ReplaceAll(string(out), " ", ""); !strings.Contains(got, tt.want) {
			t.Errorf("%s decodes to %s, want %s in it", tt.typeURL, got, tt.want)
		}
	}
	// Types the binary links are resolved as before.
	if _, err := redact.Types.FindMessageByURL(codec.TypeCluster); err != nil {
		t.Errorf("the Cluster type: %v", err)
	}
}
