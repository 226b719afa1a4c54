package track

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/adstap/adstap/codec"
)

// StreamMeta describes a stream when it opens.
type StreamMeta struct {
	ID       uint64
	ConnID   uint64
	Method   string
	Protocol codec.Protocol
	Peer     string
	OpenedAt time.Time
	// Connect is how the stream's upstream connection came up, for the
	// stream that waited for it (filled by the wiring from the relay); nil otherwise.
	Connect *codec.UpstreamConnect
}

// StreamRef is a tracked stream as its events hand it to the outputs: what
// it was opened with, and what each output keeps across the stream's events
// (OutputState). Every event about a stream carries it, so an output needs no map
// of streams of its own, and no lock that every stream takes to reach one:
// a stream's state is found through its events and goes with the stream.
type StreamRef struct {
	Meta StreamMeta

	states atomic.Pointer[[]outputState] // read without a lock; copied to add one
	mu     sync.Mutex                    // taken only to add an output's state
}

type outputState struct {
	owner any
	v     any
}

// NewStreamRef is a StreamRef for a stream opened with m, for events made
// outside a tracker (tests, replays).
func NewStreamRef(m StreamMeta) *StreamRef { return &StreamRef{Meta: m} }

// OutputState returns what owner (an output, by pointer) keeps for the stream r,
// made zero the first time owner asks; nil when r is. The events of one
// stream may reach an output from its observation worker and from the
// tracker's clock at once: what OutputState returns is shared by both, so it
// guards itself (a lock of the stream's own).
func OutputState[T any](r *StreamRef, owner any) *T {
	if r == nil {
		return nil
	}
	if p := r.states.Load(); p != nil {
		for _, s := range *p {
			if s.owner == owner {
				return s.v.(*T)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var old []outputState
	if p := r.states.Load(); p != nil {
		old = *p
		for _, s := range old {
			if s.owner == owner {
				return s.v.(*T)
			}
		}
	}
	v := new(T)
	states := append(append(make([]outputState, 0, len(old)+1), old...), outputState{owner, v})
	r.states.Store(&states)
	return v
}
