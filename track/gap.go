package track

import (
	"time"

	"github.com/adstap/adstap/codec"
)

// ObservationGap: frames of a stream were relayed but never observed, because
// the observation queue was full. The stream's tracked state may be off
// until its next full push.
type ObservationGap struct {
	StreamID uint64
	Ref      *StreamRef // nil when the stream is not tracked
	Skipped  int
	At       time.Time
}

func (ObservationGap) event() {}

// UpstreamConnected: an upstream connection came up, or failed to, with the
// time each connect phase took.
type UpstreamConnected struct{ codec.UpstreamConnect }

func (UpstreamConnected) event() {}

func (e ObservationGap) streamRef() *StreamRef { return e.Ref }
