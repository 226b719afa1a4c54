package inspect

import (
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// bootstrapCluster is the name of the replay's cluster in the bootstrap:
// Istio's name for its xDS server, which istiod's configuration may refer
// to.
const bootstrapCluster = "xds-grpc"

// Bootstrap returns an Envoy bootstrap, in YAML, with the captured node's
// id, cluster, metadata and locality, and the replay at addr (host:port or
// unix:///path) as its ADS server, in the capture's protocol: envoy -c
// with it asks the replay for what the captured proxy was sent. For an
// Istio proxy (ISTIO_VERSION in its metadata) it also names sds-grpc,
// the agent's SDS cluster istiod's clusters and listeners refer to, at
// the replay, which does not serve secrets: Envoy waits for them until its
// initial fetch timeout and goes on without.
func Bootstrap(sent *Sent, addr string) (string, error) {
	node := &core.Node{Id: sent.Node}
	if sent.RawNode != nil {
		var captured core.Node
		if err := proto.Unmarshal(sent.RawNode, &captured); err != nil {
			return "", fmt.Errorf("the captured node of %s cannot be read: %w", sent.Node, err)
		}
		node = &core.Node{Id: captured.GetId(), Cluster: captured.GetCluster(), Metadata: captured.GetMetadata(), Locality: captured.GetLocality()}
	}
	nodeJSON, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(node)
	if err != nil {
		return "", err
	}
	nodeValue, err := parseJSON(nodeJSON)
	if err != nil {
		return "", err
	}
	address, static, err := bootstrapAddress(addr)
	if err != nil {
		return "", err
	}
	apiType := "GRPC"
	if sent.Delta {
		apiType = "DELTA_GRPC"
	}
	ads := jsonObject{{"ads", jsonObject{}}, {"resource_api_version", "V3"}}
	clusters := []jsonValue{grpcCluster(bootstrapCluster, address, static)}
	if node.GetMetadata().GetFields()["ISTIO_VERSION"] != nil {
		clusters = append(clusters, grpcCluster("sds-grpc", address, static))
	}
	b := jsonObject{
		{"node", nodeValue},
		{"dynamic_resources", jsonObject{
			{"ads_config", jsonObject{
				{"api_type", apiType},
				{"transport_api_version", "V3"},
				{"grpc_services", []jsonValue{jsonObject{{"envoy_grpc", jsonObject{{"cluster_name", bootstrapCluster}}}}}},
				{"set_node_on_first_message_only", true},
			}},
			{"cds_config", ads},
			{"lds_config", ads},
		}},
		{"static_resources", jsonObject{{"clusters", clusters}}},
		{"admin", jsonObject{{"address", socketAddress("127.0.0.1", 15000)}}},
	}
	var out strings.Builder
	fmt.Fprintf(&out, "# Envoy bootstrap for node %s, served by adstap replay at %s: envoy -c THIS_FILE\n", sent.Node, addr)
	writeYAML(&out, b, "")
	return out.String(), nil
}

// bootstrapAddress is the Envoy address of the replay; static says an IP
// or a socket, which a STATIC cluster takes, rather than a name to resolve.
func bootstrapAddress(addr string) (jsonObject, bool, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		return jsonObject{{"pipe", jsonObject{{"path", path}}}}, true, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, fmt.Errorf("--listen %s: %w", addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return nil, false, fmt.Errorf("--listen %s: the bootstrap needs the port the replay will listen on", addr)
	}
	ip := net.ParseIP(host)
	if host == "" || (ip != nil && ip.IsUnspecified()) {
		host, ip = "127.0.0.1", net.IPv4(127, 0, 0, 1) // listening everywhere: the laptop's Envoy is local
	}
	return socketAddress(host, p), ip != nil, nil
}

func socketAddress(host string, port uint64) jsonObject {
	return jsonObject{{"socket_address", jsonObject{{"address", host}, {"port_value", json.Number(strconv.FormatUint(port, 10))}}}}
}

func grpcCluster(name string, address jsonObject, static bool) jsonObject {
	kind := "STRICT_DNS"
	if static {
		kind = "STATIC"
	}
	return jsonObject{
		{"name", name},
		{"type", kind},
		{"connect_timeout", "1s"},
		{"typed_extension_protocol_options", jsonObject{
			{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions", jsonObject{
				{"@type", "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"},
				{"explicit_http_config", jsonObject{{"http2_protocol_options", jsonObject{}}}},
			}},
		}},
		{"load_assignment", jsonObject{
			{"cluster_name", name},
			{"endpoints", []jsonValue{jsonObject{{"lb_endpoints", []jsonValue{jsonObject{{"endpoint", jsonObject{{"address", address}}}}}}}}},
		}},
	}
}

// writeYAML writes v, an object or a list, as block YAML at indent.
// Strings are written as JSON strings, which YAML reads the same.
func writeYAML(b *strings.Builder, v jsonValue, indent string) {
	switch v := v.(type) {
	case jsonObject:
		for _, f := range v {
			writeYAMLField(b, indent, indent, f)
		}
	case []jsonValue:
		for _, e := range v {
			writeYAMLItem(b, indent, e)
		}
	}
}

// writeYAMLField writes one key and its value: the key after first, its
// children deeper than indent.
func writeYAMLField(b *strings.Builder, first, indent string, f jsonField) {
	b.WriteString(first + yamlKey(f.Key) + ":")
	if s, ok := yamlScalar(f.Value); ok {
		b.WriteString(" " + s + "\n")
		return
	}
	b.WriteString("\n")
	writeYAML(b, f.Value, indent+"  ")
}

func writeYAMLItem(b *strings.Builder, indent string, e jsonValue) {
	if s, ok := yamlScalar(e); ok {
		b.WriteString(indent + "- " + s + "\n")
		return
	}
	switch e := e.(type) {
	case jsonObject:
		writeYAMLField(b, indent+"- ", indent+"  ", e[0])
		for _, f := range e[1:] {
			writeYAMLField(b, indent+"  ", indent+"  ", f)
		}
	case []jsonValue:
		b.WriteString(indent + "-\n")
		writeYAML(b, e, indent+"  ")
	}
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)

func yamlKey(k string) string {
	if plainKey.MatchString(k) {
		return k
	}
	return quote(k)
}

// yamlScalar writes what fits on the line of its key: scalars and empty
// collections.
func yamlScalar(v jsonValue) (string, bool) {
	switch v := v.(type) {
	case jsonObject:
		if len(v) == 0 {
			return "{}", true
		}
		return "", false
	case []jsonValue:
		if len(v) == 0 {
			return "[]", true
		}
		return "", false
	}
	var b strings.Builder
	writeJSON(&b, v, "", true)
	return b.String(), true
}
