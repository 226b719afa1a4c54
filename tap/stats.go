package tap

import (
	"sync/atomic"

	"github.com/adstap/adstap/codec"
)

// protocols are the kinds of stream the relay counts apart.
var protocols = [...]codec.Protocol{codec.SotW, codec.Delta, codec.Opaque}

func protocolIndex(p codec.Protocol) int {
	switch p {
	case codec.SotW:
		return 0
	case codec.Delta:
		return 1
	}
	return 2
}

// relayCounters count what the relay moved: every frame, observed or not.
type relayCounters struct {
	streamsActive, streamsOpened atomic.Int64
	messages, bytes              [2]atomic.Uint64 // by direction: request, response
}

// Stats reports the relay's counters, per protocol. They count every frame,
// including frames the observers never saw.
func (s *Server) Stats() map[codec.Protocol]codec.ProtocolStats {
	out := make(map[codec.Protocol]codec.ProtocolStats, len(protocols))
	for i, p := range protocols {
		c := &s.counters[i]
		out[p] = codec.ProtocolStats{
			StreamsActive: c.streamsActive.Load(),
			StreamsOpened: c.streamsOpened.Load(),
			Messages:      [2]uint64{c.messages[0].Load(), c.messages[1].Load()},
			Bytes:         [2]uint64{c.bytes[0].Load(), c.bytes[1].Load()},
		}
	}
	return out
}

func (c *relayCounters) frame(d Direction, size int) {
	c.messages[d-1].Add(1)
	c.bytes[d-1].Add(uint64(size))
}
