package refgraph

import (
	"errors"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/adstap/adstap/internal/canon"
)

// name is a name the graph holds: one copy of each distinct string for the
// whole process, however many resources and streams name it, and a pointer
// wherever it is held.
type name = canon.Name

// noName is the zero handle: no name.
var noName name

func intern(b []byte) name { return canon.MakeBytes(b) }

// str is the name's text, "" for noName.
func str(n name) string {
	if n == noName {
		return ""
	}
	return n.Value()
}

// What the graph keeps of each resource: the names it refers to, read from
// its bytes with protowire, never unmarshalled. Field numbers are those of
// Envoy's v3 API (envoy/config/...); a field the scanner does not read is
// skipped, so a resource it cannot fully read yields fewer references, never
// a wrong one.

// clusterRefs is what a cluster refers to.
type clusterRefs struct {
	// endpoints is the name its EDS assignment comes under (eds_cluster_config's
	// service_name, or the cluster's name), when the cluster is of type EDS and
	// its endpoints come over this stream (ads or self); noName otherwise.
	endpoints name
	config    name // the Istio object istiod stamped on it (istio.config)
	secrets   []name
}

// routeRef is one route's reference to one cluster.
type routeRef struct {
	routeConfig, virtualHost, route name
	cluster                         name
	// weight and total: the cluster's share of the route's traffic; total
	// 0 when the route sends everything to it.
	weight, total uint32
	config        name // the Istio object stamped on the route
}

// tcpRef is a TCP proxy's reference to one cluster.
type tcpRef struct {
	cluster       name
	weight, total uint32
}

// listenerRefs is what a listener refers to.
type listenerRefs struct {
	routeConfigs []name     // RDS names its HTTP connection managers wait for over this stream
	routes       []routeRef // routes of inline route configurations
	tcp          []tcpRef
	secrets      []name
	config       name
}

// clip gives back what appending left spare.
func (l *listenerRefs) clip() {
	l.routeConfigs, l.routes, l.tcp, l.secrets = slices.Clip(l.routeConfigs), slices.Clip(l.routes), slices.Clip(l.tcp), slices.Clip(l.secrets)
}

// assignment is what the graph keeps of a ClusterLoadAssignment.
type assignment struct {
	endpoints, healthy int32
	// elsewhere: endpoints come by another discovery (LEDS), uncounted.
	elsewhere bool
}

// Type URLs of the typed configs the scanner opens.
const (
	hcmType       = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	tcpProxyType  = "envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy"
	upstreamTLS   = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	downstreamTLS = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)

var errMalformed = errors.New("malformed protobuf")

// fields calls fn for each field of a message; v is a length-delimited
// field's bytes, x a varint's value. It stops at the first malformed field.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return errMalformed
			}
			fn(num, typ, v, 0)
			n = m
		case protowire.VarintType:
			x, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return errMalformed
			}
			fn(num, typ, nil, x)
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errMalformed
			}
		}
		b = b[n:]
	}
	return nil
}

// bytesFields is fields for the length-delimited fields only.
func bytesFields(b []byte, fn func(num protowire.Number, v []byte)) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
		if typ == protowire.BytesType {
			fn(num, v)
		}
	})
}

// anyOf reads an Any: its message name (what follows the last '/' of its
// type URL) and value.
func anyOf(b []byte) (msg string, value []byte) {
	var url []byte
	bytesFields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			url = v
		case 2:
			value = v
		}
	})
	s := string(url)
	return s[strings.LastIndexByte(s, '/')+1:], value
}

// thisStream reports whether a ConfigSource says the resource comes over the
// stream that sent the referring one: ads (3) or self (5).
func thisStream(configSource []byte) bool {
	found := false
	bytesFields(configSource, func(num protowire.Number, _ []byte) {
		if num == 3 || num == 5 {
			found = true
		}
	})
	return found
}

// istioConfig reads the object istiod stamps in a Metadata:
// filter_metadata["istio"].fields["config"].string_value.
func istioConfig(metadata []byte) name {
	var out name
	bytesFields(metadata, func(num protowire.Number, entry []byte) {
		if num != 1 { // filter_metadata
			return
		}
		key, st := mapEntry(entry)
		if string(key) != "istio" {
			return
		}
		bytesFields(st, func(num protowire.Number, entry []byte) {
			if num != 1 { // Struct.fields
				return
			}
			key, value := mapEntry(entry)
			if string(key) != "config" {
				return
			}
			bytesFields(value, func(num protowire.Number, s []byte) {
				if num == 3 { // Value.string_value
					out = intern(s)
				}
			})
		})
	})
	return out
}

func mapEntry(b []byte) (key, value []byte) {
	bytesFields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			key = v
		case 2:
			value = v
		}
	})
	return key, value
}

// scanCluster reads a Cluster.
func scanCluster(b []byte, clusterName name) (clusterRefs, error) {
	var c clusterRefs
	var discoveryType uint64 // STATIC when absent
	custom := false
	var eds []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
		switch {
		case num == 2 && typ == protowire.VarintType:
			discoveryType = x
		case typ != protowire.BytesType:
		case num == 38: // cluster_type: aggregate and other custom clusters
			custom = true
		case num == 3:
			eds = v
		case num == 24: // transport_socket
			c.secrets = transportSocketSecrets(v, c.secrets)
		case num == 43: // transport_socket_matches
			bytesFields(v, func(num protowire.Number, ts []byte) {
				if num == 3 {
					c.secrets = transportSocketSecrets(ts, c.secrets)
				}
			})
		case num == 25:
			c.config = istioConfig(v)
		}
	})
	const edsType = 3
	if discoveryType == edsType && !custom && eds != nil {
		// eds_config (1), service_name (2)
		service, local := sourced(eds, 2, 1)
		if local {
			c.endpoints = clusterName
			if len(service) > 0 {
				c.endpoints = intern(service)
			}
		}
	}
	return c, err
}

// transportSocketSecrets appends the SDS secrets a TransportSocket's TLS
// context names that come over this stream.
func transportSocketSecrets(b []byte, out []name) []name {
	bytesFields(b, func(num protowire.Number, v []byte) {
		if num != 3 { // typed_config
			return
		}
		msg, value := anyOf(v)
		if msg != upstreamTLS && msg != downstreamTLS {
			return
		}
		bytesFields(value, func(num protowire.Number, common []byte) {
			if num != 1 { // common_tls_context
				return
			}
			bytesFields(common, func(num protowire.Number, v []byte) {
				switch num {
				case 6, 7: // tls_certificate_sds_secret_configs, validation_context_sds_secret_config
					out = sdsSecret(v, out)
				case 8: // combined_validation_context
					bytesFields(v, func(num protowire.Number, v []byte) {
						if num == 2 {
							out = sdsSecret(v, out)
						}
					})
				}
			})
		})
	})
	return out
}

// sourced reads a message naming a resource (field nameNum) and the
// ConfigSource it comes from (field sourceNum): the name, and whether it
// comes over this stream.
func sourced(b []byte, nameNum, sourceNum protowire.Number) (n []byte, local bool) {
	bytesFields(b, func(num protowire.Number, v []byte) {
		switch num {
		case nameNum:
			n = v
		case sourceNum:
			local = thisStream(v)
		}
	})
	return n, local
}

// sdsSecret appends an SdsSecretConfig's name when the secret comes over
// this stream (a secret with no sds_config is static, in the bootstrap).
func sdsSecret(b []byte, out []name) []name {
	// name (1), sds_config (2)
	if n, local := sourced(b, 1, 2); local && len(n) > 0 {
		out = append(out, intern(n))
	}
	return out
}

// scanRouteConfig appends the cluster references of a RouteConfiguration.
func scanRouteConfig(b []byte, rc name, out []routeRef) ([]routeRef, error) {
	err := bytesFields(b, func(num protowire.Number, vh []byte) {
		if num != 2 { // virtual_hosts
			return
		}
		var vhost name
		var routes [][]byte
		bytesFields(vh, func(num protowire.Number, v []byte) {
			switch num {
			case 1:
				vhost = intern(v)
			case 3:
				routes = append(routes, v)
			}
		})
		for _, r := range routes {
			out = scanRoute(r, rc, vhost, out)
		}
	})
	return out, err
}

// scanRoute appends a Route's cluster references. A redirect, a direct
// response, a cluster_header or a cluster specifier plugin names no cluster.
func scanRoute(b []byte, rc, vhost name, out []routeRef) []routeRef {
	var route, config name
	var action []byte
	bytesFields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 14:
			route = intern(v)
		case 2:
			action = v
		case 4:
			config = istioConfig(v)
		}
	})
	if action == nil {
		return out
	}
	ref := routeRef{routeConfig: rc, virtualHost: vhost, route: route, config: config}
	bytesFields(action, func(num protowire.Number, v []byte) {
		switch num {
		case 1: // cluster
			r := ref
			r.cluster = intern(v)
			out = append(out, r)
		case 3: // weighted_clusters
			first := len(out)
			total := eachWeighted(v, true, func(n []byte, weight uint32) {
				r := ref
				r.cluster, r.weight = intern(n), weight
				out = append(out, r)
			})
			for i := first; i < len(out); i++ {
				out[i].total = total
			}
		}
	})
	return out
}

// eachWeighted calls add with each named cluster of a weighted_clusters
// (route's or TCP proxy's: clusters (1), each with its name (1) and weight
// (2), a google.protobuf.UInt32Value when wrapped), and returns the sum of
// the weights. A cluster without a name (a cluster_header) is not added, but
// its weight counts.
func eachWeighted(b []byte, wrapped bool, add func(n []byte, weight uint32)) (total uint32) {
	bytesFields(b, func(num protowire.Number, cw []byte) {
		if num != 1 {
			return
		}
		var n []byte
		var weight uint32
		fields(cw, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
			switch {
			case num == 1 && typ == protowire.BytesType:
				n = v
			case num == 2 && typ == protowire.VarintType && !wrapped:
				weight = uint32(x)
			case num == 2 && typ == protowire.BytesType && wrapped:
				fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) {
					if num == 1 && typ == protowire.VarintType {
						weight = uint32(x)
					}
				})
			}
		})
		total += weight
		if len(n) > 0 {
			add(n, weight)
		}
	})
	return total
}

// scanListener reads a Listener: its filter chains' HTTP connection
// managers and TCP proxies, and their TLS secrets.
func scanListener(b []byte) (listenerRefs, error) {
	var l listenerRefs
	err := bytesFields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 3, 25: // filter_chains, default_filter_chain
			scanFilterChain(v, &l)
		case 19: // api_listener (proxyless gRPC): ApiListener.api_listener, an Any
			bytesFields(v, func(num protowire.Number, a []byte) {
				if num == 1 {
					scanFilter(a, &l)
				}
			})
		case 6:
			l.config = istioConfig(v)
		}
	})
	return l, err
}

func scanFilterChain(b []byte, l *listenerRefs) {
	bytesFields(b, func(num protowire.Number, v []byte) {
		switch num {
		case 3: // filters
			bytesFields(v, func(num protowire.Number, a []byte) {
				if num == 4 { // typed_config
					scanFilter(a, l)
				}
			})
		case 6:
			l.secrets = transportSocketSecrets(v, l.secrets)
		}
	})
}

// scanFilter reads a network filter's typed config (an Any).
func scanFilter(a []byte, l *listenerRefs) {
	msg, value := anyOf(a)
	switch msg {
	case hcmType:
		bytesFields(value, func(num protowire.Number, v []byte) {
			switch num {
			case 3: // rds: config_source (1), route_config_name (2)
				if n, local := sourced(v, 2, 1); local && len(n) > 0 {
					l.routeConfigs = append(l.routeConfigs, intern(n))
				}
			case 4: // route_config, inline
				var rc name
				bytesFields(v, func(num protowire.Number, v []byte) {
					if num == 1 {
						rc = intern(v)
					}
				})
				l.routes, _ = scanRouteConfig(v, rc, l.routes)
			}
		})
	case tcpProxyType:
		bytesFields(value, func(num protowire.Number, v []byte) {
			switch num {
			case 2:
				l.tcp = append(l.tcp, tcpRef{cluster: intern(v)})
			case 10:
				first := len(l.tcp)
				total := eachWeighted(v, false, func(n []byte, weight uint32) {
					l.tcp = append(l.tcp, tcpRef{cluster: intern(n), weight: weight})
				})
				for i := first; i < len(l.tcp); i++ {
					l.tcp[i].total = total
				}
			}
		})
	}
}

// scanAssignment counts a ClusterLoadAssignment's endpoints and those that
// can take traffic: health UNKNOWN, HEALTHY or DEGRADED (Envoy's rule).
func scanAssignment(b []byte) (assignment, error) {
	var a assignment
	lbEndpoint := func(v []byte) {
		a.endpoints++
		health := uint64(0)
		fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) {
			if num == 2 && typ == protowire.VarintType {
				health = x
			}
		})
		switch health {
		case 0, 1, 5: // UNKNOWN, HEALTHY, DEGRADED
			a.healthy++
		}
	}
	err := bytesFields(b, func(num protowire.Number, v []byte) {
		if num != 2 { // endpoints
			return
		}
		bytesFields(v, func(num protowire.Number, v []byte) {
			switch num {
			case 2: // lb_endpoints
				lbEndpoint(v)
			case 7: // load_balancer_endpoints
				bytesFields(v, func(num protowire.Number, v []byte) {
					if num == 1 {
						lbEndpoint(v)
					}
				})
			case 8: // leds_cluster_locality_config
				a.elsewhere = true
			}
		})
	})
	return a, err
}
