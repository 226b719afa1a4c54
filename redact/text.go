package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/adstap/adstap/codec"
)

// Fingerprint is what stands in for a secret: its hash and length, enough
// to tell two secrets apart, useless to anyone who would use it.
func Fingerprint(secret []byte) string {
	sum := sha256.Sum256(secret)
	return fmt.Sprintf("%ssha256 %s, %d bytes]", Marker, hex.EncodeToString(sum[:8]), len(secret))
}

// fingerprintForm is exactly what Fingerprint writes.
var fingerprintForm = regexp.MustCompile(`^` + regexp.QuoteMeta(Marker) + `sha256 [0-9a-f]{16}, [0-9]+ bytes\]$`)

// isFingerprint reports whether b is a Fingerprint and nothing else.
func isFingerprint(b []byte) bool { return fingerprintForm.Match(b) }

// Marker begins every Fingerprint: bytes that hold it had a secret
// replaced.
const Marker = "[redacted by adstap: "

// pemPrivateKey matches a PEM private key block, also as proto text form
// prints it inside a quoted string (newlines as \n).
var pemPrivateKey = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`)

// redactText replaces PEM private keys in free text with their fingerprints. A
// client's NACK message may quote the resource it rejects in full (grpc-go
// does), inline TLS key included.
func redactText(s string) string {
	if !strings.Contains(s, "PRIVATE KEY") {
		return s
	}
	return pemPrivateKey.ReplaceAllStringFunc(s, func(m string) string { return Fingerprint([]byte(m)) })
}

// DecodeRequest is codec.DecodeRequest with the private keys its
// error_detail message quotes replaced (Text): every output that shows a
// NACK's message decodes requests through here, so none shows a key.
func DecodeRequest(b []byte, delta bool) (*codec.Request, error) {
	req, err := codec.DecodeRequest(b, delta)
	if err == nil && req.ErrorDetail != nil {
		req.ErrorDetail.Message = redactText(req.ErrorDetail.Message)
	}
	return req, err
}
