package track

import (
	"sync"
	"sync/atomic"
)

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

// RefOf is the stream an event is about, nil when it is about none (or was
// made outside a tracker).
func RefOf(e Event) *StreamRef {
	if a, ok := e.(interface{ streamRef() *StreamRef }); ok {
		return a.streamRef()
	}
	return nil
}

func (e StreamOpened) streamRef() *StreamRef     { return e.Ref }
func (e StreamClosed) streamRef() *StreamRef     { return e.Ref }
func (e RequestSeen) streamRef() *StreamRef      { return e.Ref }
func (e PushSent) streamRef() *StreamRef         { return e.Push.Ref }
func (e PushEnded) streamRef() *StreamRef        { return e.Push.Ref }
func (e LateAnswer) streamRef() *StreamRef       { return e.Push.Ref }
func (e FullSyncComplete) streamRef() *StreamRef { return e.Ref }
func (e FullPush) streamRef() *StreamRef         { return e.Ref }
func (e DecodeError) streamRef() *StreamRef      { return e.Ref }
func (e ObservationGap) streamRef() *StreamRef   { return e.Ref }
func (e DetectorStarted) streamRef() *StreamRef  { return e.Ref }
func (e DetectorEnded) streamRef() *StreamRef    { return e.Ref }
