package retained

import (
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/redact"
)

// TestShowResourceDecodesIstioAmbientTypes: /debug/config shows ztunnel's
// Address decoded with Istio's descriptors, not as undecoded bytes.
func TestShowResourceDecodesIstioAmbientTypes(t *testing.T) {
	leakcheck.Check(t)
	mt, err := redact.Types.FindMessageByURL(codec.TypeAddress)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(mt.Descriptor())
	w := m.Mutable(m.Descriptor().Fields().ByName("workload")).Message()
	w.Set(w.Descriptor().Fields().ByName("name"), protoreflect.ValueOfString("reviews-v1-7f9c"))
	body, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(string(showResource(Resource{TypeURL: codec.TypeAddress, Body: body})), " ", "")
	if want := `"workload":{"name":"reviews-v1-7f9c"}`; !strings.Contains(got, want) || !strings.Contains(got, codec.TypeAddress) {
		t.Errorf("/debug/config shows an Address as %s, want its type and %s", got, want)
	}
}
