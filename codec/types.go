package codec

import "strings"

// typePrefix is the host every xDS server puts in front of a message name in a
// type URL. ShortType does not depend on it: an Any may carry any host.
const typePrefix = "type.googleapis.com/"

// Message names of the resource types the tap knows by sight.
const (
	nameListener        = "envoy.config.listener.v3.Listener"
	nameRoute           = "envoy.config.route.v3.RouteConfiguration"
	nameCluster         = "envoy.config.cluster.v3.Cluster"
	nameEndpoint        = "envoy.config.endpoint.v3.ClusterLoadAssignment"
	nameSecret          = "envoy.extensions.transport_sockets.tls.v3.Secret"
	nameExtensionConfig = "envoy.config.core.v3.TypedExtensionConfig"
	nameScopedRoute     = "envoy.config.route.v3.ScopedRouteConfiguration"
	nameVirtualHost     = "envoy.config.route.v3.VirtualHost"
	nameRuntime         = "envoy.service.runtime.v3.Runtime"
	nameResource        = "envoy.service.discovery.v3.Resource"
	nameClientConfig    = "envoy.service.status.v3.ClientConfig"
	nameNameTable       = "istio.networking.nds.v1.NameTable"
	nameProxyConfig     = "istio.mesh.v1alpha1.ProxyConfig"
	nameHealthInfo      = "istio.v1.HealthInformation"
	// Ambient: what istiod sends ztunnel over Delta ADS.
	nameAddress       = "istio.workload.Address"
	nameAuthorization = "istio.security.Authorization"
)

// Type URLs as xDS servers (istiod, go-control-plane) send them.
const (
	TypeListener        = typePrefix + nameListener
	TypeRoute           = typePrefix + nameRoute
	TypeCluster         = typePrefix + nameCluster
	TypeEndpoint        = typePrefix + nameEndpoint
	TypeSecret          = typePrefix + nameSecret
	TypeExtensionConfig = typePrefix + nameExtensionConfig
	TypeScopedRoute     = typePrefix + nameScopedRoute
	TypeVirtualHost     = typePrefix + nameVirtualHost
	TypeRuntime         = typePrefix + nameRuntime

	// TypeResource marks an Any in a SotW DiscoveryResponse that wraps the
	// real resource in an envoy.service.discovery.v3.Resource, which is how a
	// SotW server gives a resource a TTL or sends a TTL heartbeat.
	TypeResource = typePrefix + nameResource

	// TypeClientConfig is what istiod puts in the resources of a syncz
	// response: one CSDS ClientConfig per proxy.
	TypeClientConfig = typePrefix + nameClientConfig

	TypeNameTable   = typePrefix + nameNameTable
	TypeProxyConfig = typePrefix + nameProxyConfig
	TypeHealthInfo  = typePrefix + nameHealthInfo

	// TypeAddress (a workload or a service) and TypeAuthorization (an
	// authorization policy) are ztunnel's types (Istio ambient).
	TypeAddress       = typePrefix + nameAddress
	TypeAuthorization = typePrefix + nameAuthorization

	// TypeSyncz is the type istioctl proxy-status asks istiod for. It is not
	// a message name and has no type.googleapis.com prefix.
	TypeSyncz = "istio.io/debug/syncz"
)

// The short names ShortType gives the types the tap knows by sight: the
// only place they are spelled, so that a package naming a type (a finding's
// owner, a column of adstap status) names it as the metrics do.
const (
	ShortListener        = "lds"
	ShortRoute           = "rds"
	ShortCluster         = "cds"
	ShortEndpoint        = "eds"
	ShortSecret          = "sds"
	ShortExtensionConfig = "ecds"
	ShortVirtualHost     = "vhds"
	ShortScopedRoute     = "srds"
	ShortRuntime         = "rtds"
	ShortNameTable       = "nds"
	ShortProxyConfig     = "pcds"
	ShortHealthInfo      = "health"
	ShortAddress         = "address"
	ShortAuthorization   = "authorization"
	// ShortSyncz is what ShortType says of TypeSyncz.
	ShortSyncz = "syncz"
	// ShortTypeOther is what ShortType says of a type it does not know.
	ShortTypeOther = "other"
)

const shortTypeSyncz = ShortSyncz

// shortNames are the short names of the resource types the tap knows by
// sight, by message name: the one table of them, which ShortType reads and
// ShortTypes lists.
var shortNames = [...]struct{ name, short string }{
	{nameListener, ShortListener},
	{nameRoute, ShortRoute},
	{nameCluster, ShortCluster},
	{nameEndpoint, ShortEndpoint},
	{nameSecret, ShortSecret},
	{nameExtensionConfig, ShortExtensionConfig},
	{nameVirtualHost, ShortVirtualHost},
	{nameScopedRoute, ShortScopedRoute},
	{nameRuntime, ShortRuntime},
	{nameNameTable, ShortNameTable},
	{nameProxyConfig, ShortProxyConfig},
	{nameHealthInfo, ShortHealthInfo},
	{nameAddress, ShortAddress},
	{nameAuthorization, ShortAuthorization},
}

// interned are the type URLs InternTypeURL returns as constants: those of
// the one table above, as xDS servers send them, and TypeSyncz.
var interned = func() map[string]string {
	m := make(map[string]string, len(shortNames)+1)
	for _, t := range shortNames {
		m[typePrefix+t.name] = typePrefix + t.name
	}
	m[TypeSyncz] = TypeSyncz
	return m
}()

// ShortType names a type URL by its xDS service, for metric labels. The result
// is one of ShortTypes, a fixed set, so that a client inventing type URLs
// cannot blow up label cardinality; anything unknown is ShortTypeOther. Only
// the message name after the last '/' counts, so any Any host is accepted.
func ShortType(typeURL string) string {
	if typeURL == TypeSyncz {
		return shortTypeSyncz
	}
	name := TypeName(typeURL)
	for _, t := range shortNames {
		if t.name == name {
			return t.short
		}
	}
	return ShortTypeOther
}

// ShortTypes returns every value ShortType returns, the known types' in the
// order of xDS's services, then syncz and other: what a metric's type label
// takes, and what is worth making once per type (label values, span names).
func ShortTypes() []string {
	out := make([]string, 0, len(shortNames)+2)
	for _, t := range shortNames {
		out = append(out, t.short)
	}
	return append(out, shortTypeSyncz, ShortTypeOther)
}

// TypeName names a type URL for people: the segment after the last '/', which
// is the full message name for every well-formed type URL. Unlike ShortType it
// is unbounded, so it belongs in logs and spans, not in metric labels.
func TypeName(typeURL string) string {
	return typeURL[strings.LastIndexByte(typeURL, '/')+1:]
}

// InternTypeURL returns the type URL b holds (made printable, as Text
// makes it): a constant for the type URLs that fill almost every frame, so
// that reading one does not allocate each time.
func InternTypeURL(b []byte) string {
	// A map indexed by string(b) does not copy b.
	if u, ok := interned[string(b)]; ok {
		return u
	}
	return Text(b)
}

// nameInField1 reports whether field 1 of a resource of this type is its name.
// It is for every Envoy resource type (ClusterLoadAssignment calls it
// cluster_name) and is assumed for unknown types, but the Istio types below
// keep something else there: NameTable a map, ProxyConfig config_path,
// HealthInformation an enum, ClientConfig the proxy's Node, ztunnel's
// Address the Workload of its oneof. Reading those as a name would put
// binary noise in logs.
func nameInField1(anyTypeURL []byte) bool {
	switch string(anyTypeURL) {
	case TypeNameTable, TypeProxyConfig, TypeHealthInfo, TypeClientConfig, TypeAddress:
		return false
	}
	return true
}
