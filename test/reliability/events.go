package reliability

import (
	"sync"

	"github.com/adstap/adstap/track"
)

// events is a track.Sink that counts what the tracker emitted.
type events struct {
	mu sync.Mutex
	c  eventCounts
}

var _ track.Sink = (*events)(nil)

// eventCounts are the tracker's events, counted by kind.
type eventCounts struct {
	StreamsOpened, StreamsClosed int
	Requests                     map[track.RequestKind]int
	PushesSent                   int
	PushesEnded                  map[track.PushResult]int
	LateAnswers                  int
	FullSyncs                    int
	DecodeErrors                 int
	DecodeErrorsByDirection      map[string]int
	// Gaps counts the frames relayed but never observed (track.ObservationGap).
	Gaps             int
	DetectorsStarted map[string]int
	DetectorsEnded   map[string]int
}

// RequestsTotal is every request the tracker classified.
func (c eventCounts) RequestsTotal() int {
	n := 0
	for _, v := range c.Requests {
		n += v
	}
	return n
}

// PushesEndedTotal is every push that got an outcome.
func (c eventCounts) PushesEndedTotal() int {
	n := 0
	for _, v := range c.PushesEnded {
		n += v
	}
	return n
}

// OnEvent counts e.
func (ev *events) OnEvent(e track.Event) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	c := &ev.c
	if c.Requests == nil {
		c.Requests = map[track.RequestKind]int{}
		c.PushesEnded = map[track.PushResult]int{}
		c.DecodeErrorsByDirection = map[string]int{}
		c.DetectorsStarted = map[string]int{}
		c.DetectorsEnded = map[string]int{}
	}
	switch e := e.(type) {
	case track.StreamOpened:
		c.StreamsOpened++
	case track.StreamClosed:
		c.StreamsClosed++
	case track.RequestSeen:
		c.Requests[e.Kind]++
	case track.PushSent:
		c.PushesSent++
	case track.PushEnded:
		c.PushesEnded[e.Result]++
	case track.LateAnswer:
		c.LateAnswers++
	case track.FullSyncComplete:
		c.FullSyncs++
	case track.DecodeError:
		c.DecodeErrors++
		c.DecodeErrorsByDirection[e.Direction.String()]++
	case track.ObservationGap:
		c.Gaps += e.Skipped
	case track.DetectorStarted:
		c.DetectorsStarted[e.Detector]++
	case track.DetectorEnded:
		c.DetectorsEnded[e.Detector]++
	}
}

// Counts returns a copy of the counts so far.
func (ev *events) Counts() eventCounts {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	c := ev.c
	c.Requests = copyMap(ev.c.Requests)
	c.PushesEnded = copyMap(ev.c.PushesEnded)
	c.DecodeErrorsByDirection = copyMap(ev.c.DecodeErrorsByDirection)
	c.DetectorsStarted = copyMap(ev.c.DetectorsStarted)
	c.DetectorsEnded = copyMap(ev.c.DetectorsEnded)
	return c
}

func copyMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
