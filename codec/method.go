package codec

import "strings"

// Protocol is how a stream speaks: SotW and Delta are xDS; opaque is any other
// method, relayed but not decoded.
type Protocol string

// The protocols.
const (
	SotW   Protocol = "sotw"
	Delta  Protocol = "delta"
	Opaque Protocol = "opaque"
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
	"ListenerDiscoveryService":         TypeListener,
	"RouteDiscoveryService":            TypeRoute,
	"ScopedRoutesDiscoveryService":     TypeScopedRoute,
	"VirtualHostDiscoveryService":      TypeVirtualHost,
	"ClusterDiscoveryService":          TypeCluster,
	"EndpointDiscoveryService":         TypeEndpoint,
	"SecretDiscoveryService":           TypeSecret,
	"RuntimeDiscoveryService":          TypeRuntime,
	"ExtensionConfigDiscoveryService":  TypeExtensionConfig,
	"LocalityEndpointDiscoveryService": "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint",
}

// DefaultTypeOf is the type URL a stream of this method carries when its
// frames do not say; "" for aggregated and opaque streams.
func DefaultTypeOf(method string) string {
	service, _, ok := splitMethod(method)
	if !ok || !isDiscoveryService(service) {
		return ""
	}
	return serviceTypes[service[strings.LastIndexByte(service, '.')+1:]]
}
