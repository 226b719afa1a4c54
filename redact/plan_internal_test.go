package redact

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestScannerFieldNumbersAreThoseOfTheDescriptors checks the numbers the
// scanner reads without a plan against go-control-plane's and protobuf's
// generated descriptors.
func TestScannerFieldNumbersAreThoseOfTheDescriptors(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		msg   proto.Message
		field protoreflect.Name
		got   protowire.Number
	}{
		{&anypb.Any{}, "type_url", anyTypeURL},
		{&anypb.Any{}, "value", anyValue},
		{&core.DataSource{}, "filename", dsFilename},
		{&core.DataSource{}, "inline_bytes", dsInlineBytes},
		{&core.DataSource{}, "inline_string", dsInlineString},
		{&core.DataSource{}, "environment_variable", dsEnvVariable},
	}
	for _, tc := range tests {
		fd := tc.msg.ProtoReflect().Descriptor().Fields().ByName(tc.field)
		if fd == nil || fd.Number() != tc.got {
			t.Errorf("%s.%s: the scanner reads field %d, the descriptor says %v", tc.msg.ProtoReflect().Descriptor().FullName(), tc.field, tc.got, fd)
		}
	}
	// The specifier oneof is the four fields the scanner replaces.
	oneof := (&core.DataSource{}).ProtoReflect().Descriptor().Oneofs().ByName("specifier")
	if oneof == nil || oneof.Fields().Len() != 4 {
		t.Errorf("DataSource's specifier oneof is %v, the scanner knows 4 fields", oneof)
	}
}

// TestPlansFollowThePathsToEverySecret walks, by number, the paths where
// Envoy and Istio put key material, and checks each plan leads along them
// to the secret: the numbers are those of the .proto files, which
// go-control-plane's descriptors must agree with.
func TestPlansFollowThePathsToEverySecret(t *testing.T) {
	leakcheck.Check(t)
	type step struct {
		name protoreflect.Name
		num  protowire.Number
	}
	tests := []struct {
		from proto.Message
		path []step // ending at the secret DataSource, or at an Any
		any  bool
	}{
		{&tlsv3.Secret{}, []step{{"tls_certificate", 2}, {"private_key", 2}}, false},
		{&tlsv3.Secret{}, []step{{"tls_certificate", 2}, {"password", 3}}, false},
		{&tlsv3.Secret{}, []step{{"generic_secret", 5}, {"secret", 1}}, false},
		{&tlsv3.Secret{}, []step{{"session_ticket_keys", 3}, {"keys", 1}}, false},
		{&tlsv3.UpstreamTlsContext{}, []step{{"common_tls_context", 1}, {"tls_certificates", 2}, {"private_key", 2}}, false},
		{&tlsv3.DownstreamTlsContext{}, []step{{"common_tls_context", 1}, {"tls_certificates", 2}, {"private_key", 2}}, false},
		{&tlsv3.DownstreamTlsContext{}, []step{{"session_ticket_keys", 4}, {"keys", 1}}, false},
		{&clusterv3.Cluster{}, []step{{"transport_socket", 24}, {"typed_config", 3}}, true},
		{&clusterv3.Cluster{}, []step{{"transport_socket_matches", 43}, {"transport_socket", 3}, {"typed_config", 3}}, true},
		{&listenerv3.Listener{}, []step{{"filter_chains", 3}, {"transport_socket", 6}, {"typed_config", 3}}, true},
		{&listenerv3.Listener{}, []step{{"default_filter_chain", 25}, {"transport_socket", 6}, {"typed_config", 3}}, true},
		{&discovery.DiscoveryResponse{}, []step{{"resources", 2}}, true},
		{&discovery.DeltaDiscoveryResponse{}, []step{{"resources", 2}, {"resource", 2}}, true},
		{&discovery.Resource{}, []step{{"resource", 2}}, true}, // SotW's TTL wrapper
	}
	for _, tc := range tests {
		md := tc.from.ProtoReflect().Descriptor()
		p := planOf(md)
		where := string(md.FullName())
		for i, s := range tc.path {
			fd := md.Fields().ByName(s.name)
			if fd == nil || fd.Number() != s.num {
				t.Fatalf("%s.%s is field %v in the descriptor, %d in the .proto", where, s.name, fd, s.num)
			}
			if p == nil {
				t.Fatalf("%s has no plan: the scanner would not look for the secret under %s", where, s.name)
			}
			fp := p.field(s.num)
			if fp == nil {
				t.Fatalf("%s's plan skips field %d (%s)", where, s.num, s.name)
			}
			where += "." + string(s.name)
			if i == len(tc.path)-1 {
				switch {
				case tc.any && (fp.msg == nil || !fp.msg.any):
					t.Errorf("%s: the plan does not open it as an Any", where)
				case !tc.any && !fp.secret:
					t.Errorf("%s: the plan does not replace it as a secret", where)
				}
				break
			}
			md, p = fd.Message(), fp.msg
		}
	}
}

// TestPlansSkipWhatCannotHoldASecret: messages without a DataSource or an
// Any anywhere below them (Struct metadata, durations, addresses) are
// skipped by their length.
func TestPlansSkipWhatCannotHoldASecret(t *testing.T) {
	leakcheck.Check(t)
	for _, m := range []proto.Message{&structpb.Struct{}, &core.DataSource{}, &core.SocketAddress{}, &clusterv3.CircuitBreakers{}} {
		if p := planOf(m.ProtoReflect().Descriptor()); p != nil {
			t.Errorf("%s has a plan: the scanner would read what cannot hold a secret", m.ProtoReflect().Descriptor().FullName())
		}
	}
	cluster := planOf((&clusterv3.Cluster{}).ProtoReflect().Descriptor())
	if fp := cluster.field(5); fp != nil { // connect_timeout
		t.Error("the cluster's plan reads its connect_timeout")
	}
	md := planOf((&core.Metadata{}).ProtoReflect().Descriptor())
	if md.field(1) != nil || md.field(2) == nil { // filter_metadata (Structs), typed_filter_metadata (Anys)
		t.Error("Metadata's plan should skip filter_metadata and read typed_filter_metadata")
	}
}
