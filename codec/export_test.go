package codec

// DecodeSegments lets the external tests decode a message cut anywhere, not
// only where gRPC's buffers end.
func (r *Response) DecodeSegments(segs [][]byte, delta bool) error {
	return r.decodeSegments(segs, delta)
}
