package track

import "time"

// ObservationGap: frames of a stream were relayed but never observed, because
// the observation queue was full. The stream's tracked state may be off
// until its next full push.
type ObservationGap struct {
	StreamID uint64
	Skipped  int
	At       time.Time
}

func (ObservationGap) event() {}
