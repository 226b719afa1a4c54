package codec

// ProtocolStats is what the relay moved on the streams of one protocol.
type ProtocolStats struct {
	StreamsActive, StreamsOpened int64
	// Messages and Bytes are indexed by direction: requests, then responses.
	Messages, Bytes [2]uint64
}
