package tap

import (
	"sync/atomic"
	"time"
)

// Defaults for the limits of Config left zero. A sidecar opens one or two
// streams on one connection; a tap in front of a whole mesh holds one per
// proxy.
const (
	DefaultMaxConcurrentStreams    = 20_000
	DefaultMaxStreamsPerConnection = 100
	DefaultMaxPendingConnections   = 1_000
)

// Refused counts what the tap turned away at its limits.
type Refused struct {
	// Streams refused with ResourceExhausted because
	// Config.MaxConcurrentStreams streams were open.
	Streams uint64
	// StreamsOnConnection: refused because their connection already carried
	// Config.MaxStreamsPerConnection streams.
	StreamsOnConnection uint64
	// Connections closed on arrival because Config.MaxPendingConnections
	// connections were still waiting to show their first bytes.
	Connections uint64
}

// limits counts, for Refused, and says each kind of refusal in the log at
// most once a minute.
type limits struct {
	streams, streamsOnConn, conns atomic.Uint64
	lastWarn                      [3]atomic.Int64
}

func (l *limits) refused() Refused {
	return Refused{Streams: l.streams.Load(), StreamsOnConnection: l.streamsOnConn.Load(), Connections: l.conns.Load()}
}

// shouldWarn reports whether refusals of kind i were not said in the last minute.
func (l *limits) shouldWarn(i int) bool {
	now := time.Now().UnixNano()
	last := l.lastWarn[i].Load()
	return now-last >= int64(time.Minute) && l.lastWarn[i].CompareAndSwap(last, now)
}
