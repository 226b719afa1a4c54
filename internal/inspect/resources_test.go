package inspect

import (
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/redact"
)

func jsonOf(t *testing.T, typeURL string, m proto.Message) jsonValue {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	v, err := resourceJSON(body{typeURL: typeURL, value: b})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestFieldChangesNamePathsInProtoFieldNames: a port moved deep in a
// cluster's load assignment, a field added and one removed.
func TestFieldChangesNamePathsInProtoFieldNames(t *testing.T) {
	leakcheck.Check(t)
	const name = "reviews.default.svc.cluster.local"
	build := func(port uint32, maglev bool) *clusterv3.Cluster {
		c := xdsconfig.Cluster(name, false)
		second := proto.Clone(xdsconfig.Endpoint(name, "10.0.0.2", port).Endpoints[0].LbEndpoints[0]).(*endpointv3.LbEndpoint)
		c.LoadAssignment.Endpoints[0].LbEndpoints = append(c.LoadAssignment.Endpoints[0].LbEndpoints, second)
		if maglev {
			c.LbPolicy = clusterv3.Cluster_MAGLEV
			c.ConnectTimeout = nil
		}
		return c
	}
	got := diffJSON(jsonOf(t, resource.ClusterType, build(9080, false)), jsonOf(t, resource.ClusterType, build(9090, true)))
	var lines []string
	for _, c := range got {
		lines = append(lines, c.String())
	}
	want := []string{
		`- connect_timeout: "5s"`,
		`~ load_assignment.endpoints[0].lb_endpoints[1].endpoint.address.socket_address.port_value: 9080 → 9090`,
		`+ lb_policy: "MAGLEV"`,
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

// TestUnknownTypesShowAsTheirTypeURLAndBase64: a resource of a type this
// binary does not know, and an unknown Any inside a known resource.
func TestUnknownTypesShowAsTheirTypeURLAndBase64(t *testing.T) {
	leakcheck.Check(t)
	v, err := resourceJSON(body{typeURL: "type.googleapis.com/acme.mesh.v1.Widget", value: []byte{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := compactJSON(v), `{"@type": "type.googleapis.com/acme.mesh.v1.Widget", "value_base64": "AQID"}`; got != want {
		t.Errorf("unknown resource: %s, want %s", got, want)
	}

	l := xdsconfig.Listener("productpage", "productpage-route")
	l.ListenerFilters = []*listenerv3.ListenerFilter{{Name: "acme.sniffer", ConfigType: &listenerv3.ListenerFilter_TypedConfig{
		TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/acme.mesh.v1.Sniffer", Value: []byte{0x08, 0x01}},
	}}}
	got := compactJSON(jsonOf(t, resource.ListenerType, l))
	for _, want := range []string{
		`"typed_config": {"@type": "type.googleapis.com/acme.mesh.v1.Sniffer", "value_base64": "CAE="}`,
		`"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"`,
		`"route_config_name": "productpage-route"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the listener's JSON lacks %s:\n%s", want, got)
		}
	}
}

// TestBodiesPairWithTheTrackersNames: the bodies of a Delta response and of
// a SotW response with a TTL-wrapped resource and a heartbeat line up with
// the names the codec (and so the tracker) reads.
func TestBodiesPairWithTheTrackersNames(t *testing.T) {
	leakcheck.Check(t)
	cluster := func(name string) *anypb.Any {
		a, err := anypb.New(xdsconfig.Cluster(name, true))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	wrap := func(r *discovery.Resource) *anypb.Any {
		a, err := anypb.New(r)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	tests := []struct {
		name  string
		delta bool
		msg   proto.Message
		want  []string // name/status
	}{
		{"delta", true, &discovery.DeltaDiscoveryResponse{TypeUrl: resource.ClusterType, Nonce: "1", Resources: []*discovery.Resource{
			{Name: "a", Version: "1", Resource: cluster("a")},
			{Name: "b", Version: "1", Resource: cluster("b")},
		}, RemovedResources: []string{"c"}}, []string{"a body", "b body"}},
		{"sotw with ttl", false, &discovery.DiscoveryResponse{TypeUrl: resource.ClusterType, Nonce: "1", Resources: []*anypb.Any{
			cluster("a"),
			wrap(&discovery.Resource{Name: "b", Resource: cluster("b"), Ttl: durationpb.New(time.Minute)}),
			wrap(&discovery.Resource{Name: "c", Ttl: durationpb.New(time.Minute)}), // a heartbeat
		}}, []string{"a body", "b body", "c heartbeat"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.msg)
			if err != nil {
				t.Fatal(err)
			}
			var resp codec.Response
			if err := resp.Decode(b, tt.delta); err != nil {
				t.Fatal(err)
			}
			bodies, err := decodeBodies(b, tt.delta, false, &resp)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, bd := range bodies {
				switch {
				case bd.heartbeat:
					got = append(got, bd.name+" heartbeat")
				case bd.typeURL == resource.ClusterType && strings.Contains(compactJSON(jsonOf(t, bd.typeURL, mustUnmarshal(t, bd.value))), `"name": "`+bd.name+`"`):
					got = append(got, bd.name+" body")
				default:
					got = append(got, bd.name+" wrong body")
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("bodies (-want +got):\n%s", diff)
			}
		})
	}
}

func mustUnmarshal(t *testing.T, b []byte) proto.Message {
	t.Helper()
	var c clusterv3.Cluster
	if err := proto.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestSecretsShowAsFingerprintsOnce: a secret the capture redacted shows as
// its fingerprint as is; one in a response the capture did not mark
// redacted is redacted on the way out.
func TestSecretsShowAsFingerprintsOnce(t *testing.T) {
	leakcheck.Check(t)
	key := []byte("-----BEGIN EC PRIVATE KEY-----\nnot really a key\n-----END EC PRIVATE KEY-----\n")
	raw, err := proto.Marshal(xdsconfig.Secret("default", []byte("cert"), key))
	if err != nil {
		t.Fatal(err)
	}
	red, redacted, err := redact.Resource(resource.SecretType, raw)
	if err != nil || !redacted {
		t.Fatalf("redact.Resource: redacted %v, err %v", redacted, err)
	}
	want := `"private_key": {"inline_string": "` + redact.Fingerprint(key) + `"}`
	for name, b := range map[string]body{
		"redacted by the capture": {typeURL: resource.SecretType, value: red, redacted: true},
		"not marked redacted":     {typeURL: resource.SecretType, value: raw},
	} {
		v, err := resourceJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		if got := compactJSON(v); !strings.Contains(got, want) || strings.Contains(got, "not really") {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
}

// TestResourceJSONDecodesIstioAmbientTypes: --resources shows ztunnel's
// Authorization decoded with Istio's descriptors.
func TestResourceJSONDecodesIstioAmbientTypes(t *testing.T) {
	leakcheck.Check(t)
	mt, err := redact.Types.FindMessageByURL(codec.TypeAuthorization)
	if err != nil {
		t.Fatal(err)
	}
	m := dynamicpb.NewMessage(mt.Descriptor())
	m.Set(m.Descriptor().Fields().ByName("name"), protoreflect.ValueOfString("allow-reviews"))
	value, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	v, err := resourceJSON(body{name: "bookinfo/allow-reviews", typeURL: codec.TypeAuthorization, value: value, redacted: true})
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	writeJSON(&sb, v, "", false)
	if got := sb.String(); !strings.Contains(got, `"allow-reviews"`) || strings.Contains(got, "value_base64") {
		t.Errorf("an Authorization renders as %s, want it decoded", got)
	}
}
