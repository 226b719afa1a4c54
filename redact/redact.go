// Package redact replaces secrets — TLS keys, bearer tokens — in the messages and headers that outputs show (capture files, /debug/config, adstap inspect). It unmarshals typed Envoy messages, so it runs on an output's own goroutine, never on the relay's or the tracker's.
package redact

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/adstap/adstap/codec"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3" // so Any values of these types can be opened
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3" // (listeners carry TLS contexts too)
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Redaction is the one step every output of adstap that shows resource
// contents or request headers goes through (capture files, /debug/config,
// inspect): secret material is replaced by its hash and length
// (codec.Fingerprint), so two captures can still be compared without either
// holding the secret.

// secretFields are the DataSource fields that hold key material: TLS private
// keys and their passwords, generic secrets (HMAC keys, OAuth secrets), and
// session ticket keys.
var secretFields = map[protoreflect.Name]bool{
	"private_key": true, "password": true, "secret": true, "keys": true,
}

var dataSourceName = (&core.DataSource{}).ProtoReflect().Descriptor().FullName()

// secretHints are byte strings present in every response that can carry key
// material: TLS types (SDS secrets, inline TLS contexts in listeners and
// clusters) and PEM keys. Responses without them are not opened at all.
var secretHints = [][]byte{[]byte("transport_sockets.tls.v3"), []byte("PRIVATE KEY")}

// Response returns a DiscoveryResponse (delta: a DeltaDiscoveryResponse)
// with every secret replaced, and whether anything was. A response with
// nothing secret in it comes back as the same slice. Resources of types the
// tap does not know are left as they are.
func Response(b []byte, delta bool) ([]byte, bool, error) {
	hinted := false
	for _, h := range secretHints {
		hinted = hinted || bytes.Contains(b, h)
	}
	if !hinted {
		return b, false, nil
	}
	var msg proto.Message = &discovery.DiscoveryResponse{}
	if delta {
		msg = &discovery.DeltaDiscoveryResponse{}
	}
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, false, fmt.Errorf("redacting: decoding the response: %w", err)
	}
	if !redactMessage(msg.ProtoReflect()) {
		return b, false, nil
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, false, fmt.Errorf("redacting: encoding the response: %w", err)
	}
	return out, true, nil
}

// Message replaces the secrets of a decoded resource in place and
// reports whether it found any.
func Message(m proto.Message) bool { return redactMessage(m.ProtoReflect()) }

func redactMessage(m protoreflect.Message) bool { return EditNested(m, redactEdit) }

// redactEdit replaces the key material of the DataSource fields that hold
// secrets, wherever they are.
var redactEdit = NestedEdit{
	Field: func(fd protoreflect.FieldDescriptor, child protoreflect.Message) (changed, descend bool) {
		if secretFields[fd.Name()] && fd.Message().FullName() == dataSourceName {
			return redactDataSource(child), false
		}
		return false, true
	},
}

// redactDataSource replaces inline key material with its fingerprint. A
// file name or environment variable is not the secret itself and stays.
func redactDataSource(m protoreflect.Message) bool {
	ds, ok := m.Interface().(*core.DataSource)
	if !ok {
		return false
	}
	var secret []byte
	switch s := ds.GetSpecifier().(type) {
	case *core.DataSource_InlineBytes:
		secret = s.InlineBytes
	case *core.DataSource_InlineString:
		secret = []byte(s.InlineString)
	default:
		return false
	}
	ds.Specifier = &core.DataSource_InlineString{InlineString: codec.Fingerprint(secret)}
	return true
}

// Request is Response for a DiscoveryRequest (delta: a
// DeltaDiscoveryRequest): the one secret a request can carry is a key quoted
// in its error_detail message.
func Request(b []byte, delta bool) ([]byte, bool, error) {
	if !bytes.Contains(b, []byte("PRIVATE KEY")) {
		return b, false, nil
	}
	var msg interface {
		proto.Message
		GetErrorDetail() *status.Status
	} = &discovery.DiscoveryRequest{}
	if delta {
		msg = &discovery.DeltaDiscoveryRequest{}
	}
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, false, fmt.Errorf("redacting: decoding the request: %w", err)
	}
	ed := msg.GetErrorDetail()
	if ed == nil || codec.RedactText(ed.Message) == ed.Message {
		return b, false, nil
	}
	ed.Message = codec.RedactText(ed.Message)
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, false, fmt.Errorf("redacting: encoding the request: %w", err)
	}
	return out, true, nil
}

// sensitiveHeaders carry credentials; headers whose names contain one of
// sensitiveWords are treated the same.
var (
	sensitiveHeaders = map[string]bool{"authorization": true, "proxy-authorization": true, "cookie": true, "set-cookie": true}
	sensitiveWords   = []string{"token", "secret", "password", "credential", "api-key", "apikey"}
)

// Headers returns a copy of gRPC metadata with credentials replaced
// by their fingerprints; an authorization scheme such as "Bearer" stays.
func Headers(md map[string][]string) map[string][]string {
	out := make(map[string][]string, len(md))
	for k, vs := range md {
		if !sensitiveHeader(k) {
			out[k] = append([]string(nil), vs...)
			continue
		}
		red := make([]string, len(vs))
		for i, v := range vs {
			scheme, cred, ok := strings.Cut(v, " ")
			if ok && !strings.Contains(scheme, "=") {
				red[i] = scheme + " " + codec.Fingerprint([]byte(cred))
			} else {
				red[i] = codec.Fingerprint([]byte(v))
			}
		}
		out[k] = red
	}
	return out
}

func sensitiveHeader(k string) bool {
	k = strings.ToLower(k)
	if sensitiveHeaders[k] {
		return true
	}
	for _, w := range sensitiveWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}
