package codec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
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

// Fingerprint is what stands in for a secret: its hash and length, enough
// to tell two secrets apart, useless to anyone who would use it.
func Fingerprint(secret []byte) string {
	sum := sha256.Sum256(secret)
	return fmt.Sprintf("%ssha256 %s, %d bytes]", RedactedMarker, hex.EncodeToString(sum[:8]), len(secret))
}

// RedactedMarker begins every Fingerprint: bytes that hold it had a secret
// replaced.
const RedactedMarker = "[redacted by adstap: "

// pemPrivateKey matches a PEM private key block, also as proto text form
// prints it inside a quoted string (newlines as \n).
var pemPrivateKey = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`)

// RedactText replaces PEM private keys in free text with their fingerprints.
// A client's NACK message may quote the resource it rejects in full (grpc-go
// does), inline TLS key included: every output that shows an error_detail
// gets it through here, since DecodeRequest applies it.
func RedactText(s string) string {
	if !strings.Contains(s, "PRIVATE KEY") {
		return s
	}
	return pemPrivateKey.ReplaceAllStringFunc(s, func(m string) string { return Fingerprint([]byte(m)) })
}
