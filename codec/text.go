package codec

import (
	"strings"
	"unicode/utf8"
)

// Text is the string a decoded field shows as. Protobuf requires strings to
// be UTF-8, but the tap relays whatever a peer sends, and one invalid byte in
// a node id or a resource name would make Prometheus panic on a label value
// and the OTLP exporter drop a whole batch of spans; every string the
// decoders hand out goes through Text, which replaces each invalid sequence
// with U+FFFD. The relayed bytes are never touched.
func Text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
