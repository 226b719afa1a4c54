package codec_test

import (
	"slices"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

func TestShortTypeAndTypeName(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		typeURL   string
		wantShort string
		wantName  string
	}{
		{resourcev3.ListenerType, "lds", "envoy.config.listener.v3.Listener"},
		{resourcev3.RouteType, "rds", "envoy.config.route.v3.RouteConfiguration"},
		{resourcev3.ClusterType, "cds", "envoy.config.cluster.v3.Cluster"},
		{resourcev3.EndpointType, "eds", "envoy.config.endpoint.v3.ClusterLoadAssignment"},
		{resourcev3.SecretType, "sds", "envoy.extensions.transport_sockets.tls.v3.Secret"},
		{resourcev3.ExtensionConfigType, "ecds", "envoy.config.core.v3.TypedExtensionConfig"},
		{resourcev3.VirtualHostType, "vhds", "envoy.config.route.v3.VirtualHost"},
		{resourcev3.ScopedRouteType, "srds", "envoy.config.route.v3.ScopedRouteConfiguration"},
		{resourcev3.RuntimeType, "rtds", "envoy.service.runtime.v3.Runtime"},
		{"type.googleapis.com/istio.networking.nds.v1.NameTable", "nds", "istio.networking.nds.v1.NameTable"},
		{"type.googleapis.com/istio.mesh.v1alpha1.ProxyConfig", "pcds", "istio.mesh.v1alpha1.ProxyConfig"},
		{"type.googleapis.com/istio.v1.HealthInformation", "health", "istio.v1.HealthInformation"},
		{"istio.io/debug/syncz", "syncz", "syncz"},
		{"type.googleapis.com/istio.workload.Address", "address", "istio.workload.Address"},
		{"type.googleapis.com/istio.security.Authorization", "authorization", "istio.security.Authorization"},
		// Any allows any host in front of the message name.
		{"example.com/envoy.config.cluster.v3.Cluster", "cds", "envoy.config.cluster.v3.Cluster"},
		{"type.googleapis.com/envoy.api.v2.Cluster", "other", "envoy.api.v2.Cluster"},
		{resourcev3.ThriftRouteType, "other", "envoy.extensions.filters.network.thrift_proxy.v3.RouteConfiguration"},
		{"istio.io/debug/config_dump", "other", "config_dump"},
		{"other.example/syncz", "other", "syncz"},
		{"no-slash-at-all", "other", "no-slash-at-all"},
		{"trailing/", "other", ""},
		{"", "other", ""},
	}
	short := codec.ShortTypes()
	returned := map[string]bool{}
	for _, tt := range tests {
		returned[tt.wantShort] = true
		if !slices.Contains(short, tt.wantShort) {
			t.Errorf("ShortTypes() = %v lacks %q, which ShortType(%q) returns", short, tt.wantShort, tt.typeURL)
		}
		if got := codec.ShortType(tt.typeURL); got != tt.wantShort {
			t.Errorf("ShortType(%q) = %q, want %q", tt.typeURL, got, tt.wantShort)
		}
		if got := codec.TypeName(tt.typeURL); got != tt.wantName {
			t.Errorf("TypeName(%q) = %q, want %q", tt.typeURL, got, tt.wantName)
		}
	}
	// Every short name is one a type URL above gets, and is listed once.
	seen := map[string]bool{}
	for _, s := range short {
		if !returned[s] || seen[s] {
			t.Errorf("ShortTypes() = %v: %q is listed twice or is what no type URL of the test gets", short, s)
		}
		seen[s] = true
	}
}

// The exported constants must be the strings go-control-plane servers send.
func TestTypeURLConstants(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct{ got, want string }{
		{codec.TypeListener, resourcev3.ListenerType},
		{codec.TypeRoute, resourcev3.RouteType},
		{codec.TypeCluster, resourcev3.ClusterType},
		{codec.TypeEndpoint, resourcev3.EndpointType},
		{codec.TypeSecret, resourcev3.SecretType},
		{codec.TypeExtensionConfig, resourcev3.ExtensionConfigType},
		{codec.TypeScopedRoute, resourcev3.ScopedRouteType},
		{codec.TypeVirtualHost, resourcev3.VirtualHostType},
		{codec.TypeRuntime, resourcev3.RuntimeType},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("constant %q, go-control-plane says %q", tt.got, tt.want)
		}
	}
}

// InternTypeURL knows every type of the short-name table, and reading one
// allocates nothing; any other type URL is copied.
func TestInternTypeURL(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range []struct {
		typeURL string
		interns bool
	}{
		{codec.TypeCluster, true},
		{codec.TypeEndpoint, true},
		{codec.TypeListener, true},
		{codec.TypeRoute, true},
		{codec.TypeSecret, true},
		{codec.TypeExtensionConfig, true},
		{codec.TypeScopedRoute, true},
		{codec.TypeVirtualHost, true},
		{codec.TypeRuntime, true},
		{codec.TypeNameTable, true},
		{codec.TypeProxyConfig, true},
		{codec.TypeHealthInfo, true},
		{codec.TypeAddress, true},
		{codec.TypeAuthorization, true},
		{codec.TypeSyncz, true},
		{"type.googleapis.com/envoy.api.v2.Cluster", false},
	} {
		b := []byte(tt.typeURL)
		if got := codec.InternTypeURL(b); got != tt.typeURL {
			t.Errorf("InternTypeURL(%q) = %q", tt.typeURL, got)
		}
		allocs := testing.AllocsPerRun(10, func() { codec.InternTypeURL(b) })
		if got := allocs == 0; got != tt.interns {
			t.Errorf("InternTypeURL(%q): %v allocations, want interned %v", tt.typeURL, allocs, tt.interns)
		}
	}
}
