package inspect

import (
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/track"
)

// Filter narrows what inspect shows; the replay itself still reads every
// record, so that the diffs, states and detectors are those the tap saw.
// Zero fields keep everything.
type Filter struct {
	Node   string // a node id
	Type   string // a short name (cds) or a type URL
	Stream uint64
	// Since and Until bound the time of what is shown (inclusive).
	Since, Until time.Time
}

func (f Filter) empty() bool { return f == Filter{} }

// filtered passes a consumer the events the filter keeps. A stream's node is
// known from its first request only, so the opening of a stream is held
// back until then, and dropped with the rest of the stream if the node is
// another. The consumers that count (summary, NACKs, pushes) are told of
// the opening of a matching stream even before Since, since they keep
// their books by stream; the timeline is not.
type filtered struct {
	next      consumer
	f         Filter
	keepOpens bool
	node      map[uint64]string // stream → node id, once known
	held      map[uint64]heldOpen
	// taker is next's, when it takes accepted pushes: what the filter
	// keeps from next it lets go of in next's stead.
	taker *track.Taker
}

// take lets next take accepted pushes, if it does.
func (c *filtered) take(tr *track.Tracker) *track.Taker {
	if a, ok := c.next.(acceptor); ok {
		c.taker = a.take(tr)
	}
	return c.taker
}

// drop lets go of what e hands next, which the filter keeps from it.
func (c *filtered) drop(e track.Event) {
	switch e := e.(type) {
	case track.PushEnded:
		c.taker.Lease(e.Accepted).Release()
	case track.LateAnswer:
		c.taker.Lease(e.Accepted).Release()
	}
}

type heldOpen struct {
	st *step
	ev track.StreamOpened
}

func newFiltered(next consumer, f Filter, keepOpens bool) *filtered {
	return &filtered{next: next, f: f, keepOpens: keepOpens, node: map[uint64]string{}, held: map[uint64]heldOpen{}}
}

func (c *filtered) inTime(t time.Time) bool {
	return (c.f.Since.IsZero() || !t.Before(c.f.Since)) && (c.f.Until.IsZero() || !t.After(c.f.Until))
}

func (c *filtered) note(n note) {
	if c.inTime(n.at) {
		c.next.note(n)
	}
}

func (c *filtered) events(st *step, evs []track.Event) {
	var out []track.Event
	for _, e := range evs {
		if open, ok := e.(track.StreamOpened); ok {
			if c.f.Stream != 0 && open.Stream.ID != c.f.Stream {
				continue // a StreamOpened hands nothing over
			}
			if c.f.Node != "" {
				c.held[open.Stream.ID] = heldOpen{st: st, ev: open}
				continue
			}
			if c.keepOpens || c.inTime(st.At) {
				out = append(out, e)
			}
			continue
		}
		id, node, typeURL := aboutOf(e)
		if id != 0 && node != "" {
			if _, known := c.node[id]; !known {
				c.node[id] = node
				if h, ok := c.held[id]; ok {
					delete(c.held, id)
					if node == c.f.Node && (c.keepOpens || c.inTime(h.st.At)) {
						c.flush(st, &out)
						c.next.events(h.st, []track.Event{h.ev})
					}
				}
			}
		}
		if c.keeps(id, node, typeURL, st.At) {
			out = append(out, e)
		} else {
			c.drop(e)
		}
		if _, closed := e.(track.StreamClosed); closed {
			delete(c.held, id)
			delete(c.node, id)
		}
	}
	c.flush(st, &out)
}

func (c *filtered) flush(st *step, out *[]track.Event) {
	if len(*out) > 0 {
		c.next.events(st, *out)
		*out = nil
	}
}

func (c *filtered) keeps(id uint64, node, typeURL string, at time.Time) bool {
	if !c.inTime(at) {
		return false
	}
	if c.f.Stream != 0 && id != c.f.Stream {
		return false
	}
	if c.f.Node != "" {
		if node == "" && id != 0 {
			node = c.node[id]
		}
		if node != c.f.Node {
			return false
		}
	}
	if c.f.Type != "" && typeURL != "" && typeURL != c.f.Type && codec.ShortType(typeURL) != c.f.Type {
		return false
	}
	return true
}

// aboutOf says which stream, node and type an event is about, as far as it
// says.
func aboutOf(e track.Event) (stream uint64, node, typeURL string) {
	switch e := e.(type) {
	case track.StreamClosed:
		return e.Stream.ID, e.Node.ID, ""
	case track.RequestSeen:
		return e.StreamID, e.Node.ID, e.TypeURL
	case track.PushSent:
		return e.Push.StreamID, e.Push.Node.ID, e.Push.TypeURL
	case track.PushEnded:
		return e.Push.StreamID, e.Push.Node.ID, e.Push.TypeURL
	case track.LateAnswer:
		return e.Push.StreamID, e.Push.Node.ID, e.Push.TypeURL
	case track.FullSyncComplete:
		return e.StreamID, e.Node.ID, ""
	case track.DecodeError:
		return e.StreamID, "", ""
	case track.ObservationGap:
		return e.StreamID, "", ""
	case track.DetectorStarted:
		return e.StreamID, e.Node, e.TypeURL
	case track.DetectorEnded:
		return e.StreamID, e.Node, e.TypeURL
	}
	return 0, "", ""
}
