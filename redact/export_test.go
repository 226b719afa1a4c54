package redact

// Response returns a DiscoveryResponse (delta: a DeltaDiscoveryResponse)
// with every secret replaced, and whether anything was. A response with
// nothing secret in it comes back as the same slice. Resources of types the
// tap does not know are left as they are.
func Response(b []byte, delta bool) ([]byte, bool, error) {
	s := scanners.Get().(*Scanner)
	defer scanners.Put(s)
	r, err := s.Response([][]byte{b}, delta)
	return r.apply(b, err)
}

// Request is Response for a DiscoveryRequest (delta: a
// DeltaDiscoveryRequest): the one secret a request can carry is a key quoted
// in its error_detail message.
func Request(b []byte, delta bool) ([]byte, bool, error) {
	s := scanners.Get().(*Scanner)
	defer scanners.Put(s)
	r, err := s.Request([][]byte{b}, delta)
	return r.apply(b, err)
}

// Len is the size of the message once redacted.
func (r *Redaction) Len() int { return r.redactedLen() }
