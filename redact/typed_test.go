package redact_test

import (
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/adstap/adstap/redact"
)

// typedResponse is how adstap redacted before the scanner, kept to check
// the scanner against and to measure it by: decode the whole response into
// typed messages, opening every Any the binary knows, replace every inline
// DataSource in a private_key, password, secret or keys field, and encode
// it all again. (It also skipped responses without a TLS type URL or a
// PEM key in them; that shortcut is left out here, so the two walk the
// same responses.)
func typedResponse(b []byte, delta bool) ([]byte, bool, error) {
	var msg proto.Message = &discovery.DiscoveryResponse{}
	if delta {
		msg = &discovery.DeltaDiscoveryResponse{}
	}
	if err := proto.Unmarshal(b, msg); err != nil {
		return nil, false, fmt.Errorf("redacting: decoding the response: %w", err)
	}
	if !redact.EditNested(msg.ProtoReflect(), typedEdit) {
		return b, false, nil
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return nil, false, fmt.Errorf("redacting: encoding the response: %w", err)
	}
	return out, true, nil
}

var typedSecretFields = map[protoreflect.Name]bool{"private_key": true, "password": true, "secret": true, "keys": true}

var typedEdit = redact.NestedEdit{
	Field: func(fd protoreflect.FieldDescriptor, child protoreflect.Message) (changed, descend bool) {
		if typedSecretFields[fd.Name()] && fd.Message().FullName() == "envoy.config.core.v3.DataSource" {
			return typedDataSource(child), false
		}
		return false, true
	},
}

func typedDataSource(m protoreflect.Message) bool {
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
	ds.Specifier = &core.DataSource_InlineString{InlineString: redact.Fingerprint(secret)}
	return true
}
