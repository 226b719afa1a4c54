package redact_test

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/redact"
)

// TestStandInUnknownAnys: an Any of a type adstap does not know, two levels
// down through a known Any, stops protojson; once stood in, the whole
// message renders, showing the unknown one's type URL and bytes.
func TestStandInUnknownAnys(t *testing.T) {
	leakcheck.Check(t)
	unknown := &anypb.Any{TypeUrl: "type.googleapis.com/acme.Widget", Value: []byte{1, 2, 3}}
	inner := &clusterv3.Cluster{Name: "inner", TypedExtensionProtocolOptions: map[string]*anypb.Any{"acme": unknown}}
	packedInner, err := anypb.New(inner)
	if err != nil {
		t.Fatal(err)
	}
	outer := &clusterv3.Cluster{Name: "outer", TypedExtensionProtocolOptions: map[string]*anypb.Any{"nested": packedInner}}
	if _, err := protojson.Marshal(outer); err == nil {
		t.Fatal("protojson rendered a message with an unknown Any: the test needs one it cannot")
	}
	if !redact.StandInUnknownAnys(outer.ProtoReflect()) {
		t.Fatal("StandInUnknownAnys changed nothing")
	}
	out, err := protojson.Marshal(outer)
	if err != nil {
		t.Fatalf("protojson after the stand-in: %v", err)
	}
	for _, want := range []string{`"outer"`, `"inner"`, redact.UnknownTypeKey, "type.googleapis.com/acme.Widget", "AQID"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered message lacks %s:\n%s", want, out)
		}
	}
	if redact.StandInUnknownAnys(outer.ProtoReflect()) {
		t.Error("a second pass changed something: nothing unknown was left")
	}
}

// TestEditNestedDescend: Field sees every nested message once, and one it
// stops at is not walked into.
func TestEditNestedDescend(t *testing.T) {
	leakcheck.Check(t)
	c := &clusterv3.Cluster{
		Name: "c",
		TransportSocketMatches: []*clusterv3.Cluster_TransportSocketMatch{
			{Name: "a"}, {Name: "b"},
		},
		// Not walked into: its threshold must not be seen.
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 50}},
		// Walked into: its threshold is seen.
		LbSubsetConfig: &clusterv3.Cluster_LbSubsetConfig{SubsetSelectors: []*clusterv3.Cluster_LbSubsetConfig_LbSubsetSelector{{}}},
	}
	var seen []string
	redact.EditNested(c.ProtoReflect(), redact.NestedEdit{
		Field: func(fd protoreflect.FieldDescriptor, child protoreflect.Message) (bool, bool) {
			seen = append(seen, string(fd.Name()))
			return false, fd.Name() != "common_lb_config"
		},
	})
	slices.Sort(seen) // protoreflect ranges in no set order
	if got, want := strings.Join(seen, ","), "common_lb_config,lb_subset_config,subset_selectors,transport_socket_matches,transport_socket_matches"; got != want {
		t.Errorf("fields seen %s, want %s", got, want)
	}
}
