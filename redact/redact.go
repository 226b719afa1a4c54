// Package redact replaces secrets — TLS keys, bearer tokens — in the messages and headers that outputs show (capture files, /debug/config, adstap inspect). It reads messages in their wire form, off the relay's and the tracker's goroutines.
package redact

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/adstap/adstap/codec"
	// The types whose Any values can carry key material are linked in, so
	// the plans of what they hold can be made from their descriptors:
	// clusters and listeners carry TLS contexts, SDS secrets are TLS types.
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// Redaction is the one step every output of adstap that shows resource
// contents or request headers goes through (capture files, /debug/config,
// inspect): secret material is replaced by its hash and length
// (Fingerprint), so two captures can still be compared without either
// holding the secret.
//
// Secrets are found in the wire form, by a Scanner: an inline DataSource in
// a private_key, password, secret or keys field, at any depth of any type
// the binary knows, through any Any. A response is never decoded into typed
// messages: of a 40 MB push only the fields that can lead to a secret are
// read, the rest is skipped by its length, and only the path down to a
// secret found is encoded again.

// The roots the scanner starts from, and the fields read on the way.
var (
	sotwResponse  = sync.OnceValue(func() *plan { return planOf((&discovery.DiscoveryResponse{}).ProtoReflect().Descriptor()) })
	deltaResponse = sync.OnceValue(func() *plan { return planOf((&discovery.DeltaDiscoveryResponse{}).ProtoReflect().Descriptor()) })

	sotwResponseTypeURL  = numberOf(&discovery.DiscoveryResponse{}, "type_url")
	deltaResponseTypeURL = numberOf(&discovery.DeltaDiscoveryResponse{}, "type_url")
	sotwRequestTypeURL   = numberOf(&discovery.DiscoveryRequest{}, "type_url")
	deltaRequestTypeURL  = numberOf(&discovery.DeltaDiscoveryRequest{}, "type_url")
	sotwErrorDetail      = numberOf(&discovery.DiscoveryRequest{}, "error_detail")
	deltaErrorDetail     = numberOf(&discovery.DeltaDiscoveryRequest{}, "error_detail")
	statusMessage        = numberOf(&status.Status{}, "message")
)

func numberOf(m interface {
	ProtoReflect() protoreflect.Message
}, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

var scanners = sync.Pool{New: func() any { return new(Scanner) }}

// Resource returns one resource, of the type typeURL names, with every
// secret replaced, and whether anything was, as /debug/config and adstap
// inspect show it. A resource with nothing secret in it comes back as the
// same slice; one of a type the tap does not know is left as it is.
func Resource(typeURL string, b []byte) ([]byte, bool, error) {
	s := scanners.Get().(*Scanner)
	defer scanners.Put(s)
	r, err := s.resource(typeURL, [][]byte{b})
	return r.apply(b, err)
}

// apply returns b redacted as r says, in a slice of its own.
func (r *Redaction) apply(b []byte, err error) ([]byte, bool, error) {
	if err != nil {
		return nil, false, err
	}
	if !r.Redacted() {
		return b, false, nil
	}
	out := make([]byte, 0, r.redactedLen())
	for _, p := range r.AppendPieces(nil, [][]byte{b}) {
		out = append(out, p...)
	}
	return out, true, nil
}

// Request finds, in a DiscoveryRequest (delta: a DeltaDiscoveryRequest)
// whose bytes are segs, the private keys its error_detail message quotes.
func (s *Scanner) Request(segs [][]byte, delta bool) (Redaction, error) {
	typeURL, errorDetail := sotwRequestTypeURL, sotwErrorDetail
	if delta {
		typeURL, errorDetail = deltaRequestTypeURL, deltaErrorDetail
	}
	s.w.reset(segs)
	s.edits = s.edits[:0]
	defer func() { s.w.segs = nil }()
	r := Redaction{size: s.w.size()}
	for off := 0; off < r.size; {
		f, err := s.w.field(off, r.size)
		if err != nil {
			return Redaction{}, fmt.Errorf("redacting: reading the request: %w", err)
		}
		if f.typ == protowire.BytesType {
			switch f.num {
			case typeURL:
				r.TypeURL = codec.InternTypeURL(s.w.bytes(f.value, f.end, &s.url))
			case errorDetail:
				g, err := s.errorDetail(f)
				if err != nil {
					return Redaction{}, fmt.Errorf("redacting: reading the request: %w", err)
				}
				r.grown += s.resize(f, g)
			}
		}
		off = f.end
	}
	r.edits = s.sortedEdits()
	return r, nil
}

// errorDetail replaces the PEM private keys quoted in the message of the
// google.rpc.Status f.
func (s *Scanner) errorDetail(f field) (int, error) {
	grown := 0
	for off := f.value; off < f.end; {
		g, err := s.w.field(off, f.end)
		if err != nil {
			return 0, err
		}
		off = g.end
		if g.num != statusMessage || g.typ != protowire.BytesType {
			continue
		}
		var scratch []byte
		text := s.w.bytes(g.value, g.end, &scratch)
		if !bytes.Contains(text, []byte("PRIVATE KEY")) {
			continue
		}
		red := redactText(string(text))
		if red == string(text) {
			continue
		}
		out := s.w.appendRange(nil, g.start, g.length)
		out = protowire.AppendString(out, red)
		s.edits = append(s.edits, edit{off: g.start, n: g.end - g.start, b: out})
		grown += len(out) - (g.end - g.start)
	}
	return grown, nil
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
				red[i] = scheme + " " + Fingerprint([]byte(cred))
			} else {
				red[i] = Fingerprint([]byte(v))
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
