package istio_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"istio.io/istio/pkg/workloadapi"
	"istio.io/istio/pkg/workloadapi/security"
)

var update = flag.Bool("update", false, "rewrite the descriptors of Istio's ambient types adstap embeds")

// ambientDescriptors is where adstap keeps the descriptors of ztunnel's xDS
// types, which only istio.io/istio publishes (the product does not depend
// on it).
const ambientDescriptors = "../redact/istio_ambient.binpb"

// TestAmbientDescriptorsAreIstios: the descriptors adstap decodes
// istio.workload.Address and istio.security.Authorization with are those of
// the pinned Istio's generated code, byte for byte. Run with -update after
// moving the pin.
func TestAmbientDescriptorsAreIstios(t *testing.T) {
	set := &descriptorpb.FileDescriptorSet{}
	for _, f := range []protoreflect.FileDescriptor{workloadapi.File_workloadapi_workload_proto, security.File_workloadapi_security_authorization_proto} {
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	want, err := proto.MarshalOptions{Deterministic: true}.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.FromSlash(ambientDescriptors)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestAmbientDescriptorsAreIstios -update in istio/)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the pinned Istio's descriptors of its ambient types: run go test -run TestAmbientDescriptorsAreIstios -update in istio/", ambientDescriptors)
	}
}
