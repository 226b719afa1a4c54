package track

import (
	"strings"

	"github.com/adstap/adstap/codec"
)

// ProtocolOf tells how a gRPC method speaks. Only the streaming methods of the
// xDS discovery services carry DiscoveryRequest/Response (Stream*) or their
// Delta twins (Delta*). Other envoy.service.*.v3 services also have Stream*
// methods (access logs, metrics, load reports, taps, HDS, CSDS) whose messages
// are not xDS envelopes, so the service must be a discovery service too;
// Fetch* is unary and left opaque.
func ProtocolOf(method string) Protocol {
	service, name, ok := splitMethod(method)
	if !ok || !isDiscoveryService(service) {
		return Opaque
	}
	switch {
	case strings.HasPrefix(name, "Stream"):
		return SotW
	case strings.HasPrefix(name, "Delta"):
		return Delta
	}
	return Opaque
}

// splitMethod splits "/pkg.Service/Method" into its fully qualified service
// and method names.
func splitMethod(method string) (service, name string, ok bool) {
	method = strings.TrimPrefix(method, "/")
	i := strings.LastIndexByte(method, '/')
	if i <= 0 || i == len(method)-1 {
		return "", "", false
	}
	return method[:i], method[i+1:], true
}

func isDiscoveryService(service string) bool {
	i := strings.LastIndexByte(service, '.')
	if i < 0 {
		return false
	}
	pkg, svc := service[:i], service[i+1:]
	if !strings.HasPrefix(pkg, "envoy.service.") || !strings.HasSuffix(pkg, ".v3") {
		return false
	}
	switch svc {
	case "HealthDiscoveryService", "ClientStatusDiscoveryService":
		// HDS and CSDS borrow the name but not the messages.
		return false
	}
	return strings.HasSuffix(svc, "DiscoveryService")
}

// serviceTypes maps a per-type discovery service to the type it serves, for
// clients that leave type_url empty on a non-aggregated stream, which the
// protocol allows there.
var serviceTypes = map[string]string{
	"ListenerDiscoveryService":         codec.TypeListener,
	"RouteDiscoveryService":            codec.TypeRoute,
	"ScopedRoutesDiscoveryService":     codec.TypeScopedRoute,
	"VirtualHostDiscoveryService":      codec.TypeVirtualHost,
	"ClusterDiscoveryService":          codec.TypeCluster,
	"EndpointDiscoveryService":         codec.TypeEndpoint,
	"SecretDiscoveryService":           codec.TypeSecret,
	"RuntimeDiscoveryService":          codec.TypeRuntime,
	"ExtensionConfigDiscoveryService":  codec.TypeExtensionConfig,
	"LocalityEndpointDiscoveryService": "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint",
}

// defaultTypeOf is the type URL a stream of this method carries when its
// frames do not say; "" for aggregated and opaque streams.
func defaultTypeOf(method string) string {
	service, _, ok := splitMethod(method)
	if !ok || !isDiscoveryService(service) {
		return ""
	}
	return serviceTypes[service[strings.LastIndexByte(service, '.')+1:]]
}
