package track

import "time"

// window remembers the times of the last n occurrences of something, which
// is all it takes to tell whether n of them fell within a duration: its size
// is fixed however fast things happen.
type window struct {
	times []time.Time
	next  int
}

func newWindow(n int) window { return window{times: make([]time.Time, n)} }

func (w *window) add(t time.Time) {
	w.times[w.next] = t
	w.next = (w.next + 1) % len(w.times)
}

// count returns how many remembered times are less than d before now. Times
// after now count too: different streams report times that may be slightly
// out of order.
func (w *window) count(now time.Time, d time.Duration) int {
	n := 0
	for _, t := range w.times {
		if !t.IsZero() && now.Sub(t) < d {
			n++
		}
	}
	return n
}

// episode is one stretch of time during which a detector's condition held.
type episode struct {
	detector string
	key      string
	streamID uint64
	ref      *StreamRef
	node     string
	typeURL  string
	since    time.Time
	count    int
}
