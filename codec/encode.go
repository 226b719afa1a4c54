package codec

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The envelope around resources, taken apart and put together without
// decoding them: adstap replay serves a capture's resources as they were
// captured, byte for byte, in envelopes of its own.

// RawResources returns every entry of a response's resources field as it is
// on the wire: in SotW each is a google.protobuf.Any, in Delta an
// envoy.service.discovery.v3.Resource. The slices are views into b.
func RawResources(b []byte, delta bool) ([][]byte, error) {
	num := protowire.Number(respResources)
	if delta {
		num = drespResources
	}
	var out [][]byte
	rd := fieldReader{buf: b}
	for rd.next() {
		if rd.bytesField(num) {
			out = append(out, rd.b)
		}
	}
	if rd.err != nil {
		return nil, fmt.Errorf("reading the resources of a response %w", rd.err)
	}
	return out, nil
}

// WrappedAny returns the Any a Delta Resource carries (its resource field),
// as it is on the wire; nil for a Resource without one (a TTL heartbeat).
func WrappedAny(resource []byte) []byte { return lastField(resource, resourceResource) }

// AnyTypeURL returns the type_url of an Any as it is on the wire.
func AnyTypeURL(anyBytes []byte) string {
	return InternTypeURL(lastField(anyBytes, anyTypeURL))
}

// AnyValue returns the value of an Any as it is on the wire.
func AnyValue(anyBytes []byte) []byte { return lastField(anyBytes, anyValue) }

// RawNode returns the node field of a request as it is on the wire (an
// envoy.config.core.v3.Node), nil when the request has none.
func RawNode(b []byte, delta bool) []byte {
	if delta {
		return lastField(b, dreqNode)
	}
	return lastField(b, reqNode)
}

// lastField is the last occurrence of the length-delimited field num of b,
// as protobuf reads a repeated singular field; nil when there is none or b
// cannot be read.
func lastField(b []byte, num protowire.Number) []byte {
	var out []byte
	rd := fieldReader{buf: b}
	for rd.next() {
		if rd.bytesField(num) {
			out = rd.b
		}
	}
	if rd.err != nil {
		return nil
	}
	return out
}

// AppendSotWResponse appends a DiscoveryResponse holding resources, each a
// google.protobuf.Any as it was on the wire, to b.
func AppendSotWResponse(b []byte, typeURL, version, nonce string, resources [][]byte) []byte {
	b = appendString(b, respVersionInfo, version)
	for _, r := range resources {
		b = protowire.AppendTag(b, respResources, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
	}
	b = appendString(b, respTypeURL, typeURL)
	return appendString(b, respNonce, nonce)
}

// AppendDeltaResponse appends a DeltaDiscoveryResponse holding resources,
// each an envoy.service.discovery.v3.Resource as it was on the wire, and
// the names in removed, to b.
func AppendDeltaResponse(b []byte, typeURL, version, nonce string, resources [][]byte, removed []string) []byte {
	b = appendString(b, drespSystemVersionInfo, version)
	for _, r := range resources {
		b = protowire.AppendTag(b, drespResources, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
	}
	b = appendString(b, drespTypeURL, typeURL)
	b = appendString(b, drespNonce, nonce)
	for _, n := range removed {
		b = appendString(b, drespRemovedResources, n)
	}
	return b
}

// AppendResource appends an envoy.service.discovery.v3.Resource named name,
// of version version, around anyBytes, a google.protobuf.Any as it was on
// the wire, to b.
func AppendResource(b []byte, name, version string, anyBytes []byte) []byte {
	b = appendString(b, resourceVersion, version)
	b = protowire.AppendTag(b, resourceResource, protowire.BytesType)
	b = protowire.AppendBytes(b, anyBytes)
	return appendString(b, resourceName, name)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
