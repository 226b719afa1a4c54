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

func (c *relayCounters) frame(d Direction, size int) {
	c.messages[d-1].Add(1)
	c.bytes[d-1].Add(uint64(size))
}
