package track

import (
	"time"

	"github.com/adstap/adstap/codec"
)

// StreamSummary is what a metrics scrape reads of one open stream: who it
// is and, per type, its state. It holds no names, so reading every stream
// of a busy tap costs a few words per type.
type StreamSummary struct {
	ID           uint64
	Node         string // the node id, "" before the first request names it
	IstioVersion string // ISTIO_VERSION from the node's metadata
	UserAgent    string
	ControlPlane string // the latest control_plane.identifier
	Types        []TypeSummary
}

// TypeSummary is one type of a stream, as StreamState's TypeState says it.
type TypeSummary struct {
	Type       string // the short name (codec.ShortType)
	State      State
	LastSentAt time.Time
	LastACKAt  time.Time
	// NotSent counts the type's resources reported ResourceNotSent.
	NotSent int
}

// Summaries returns every open stream's summary, appended to buf, in no
// particular order. The syncz type istioctl asks istiod is left out: it is
// a question, not configuration.
func (t *Tracker) Summaries(buf []StreamSummary) []StreamSummary {
	t.streams.Range(func(_, v any) bool {
		s := v.(*stream)
		s.mu.Lock()
		if !s.closed && s.meta.Protocol != codec.Opaque {
			sum := StreamSummary{ID: s.meta.ID, Node: s.node.ID, IstioVersion: s.istioVersion, UserAgent: s.node.UserAgent,
				ControlPlane: s.controlPlane, Types: make([]TypeSummary, 0, len(s.order))}
			for _, ts := range s.order {
				if ts.url == codec.TypeSyncz {
					continue
				}
				ty := TypeSummary{Type: ts.short, State: ts.out.state(&ts.sent), LastSentAt: ts.sent.at, LastACKAt: ts.out.ackedAt}
				if ts.res != nil {
					ty.NotSent = ts.res.notSent
				}
				sum.Types = append(sum.Types, ty)
			}
			buf = append(buf, sum)
		}
		s.mu.Unlock()
		return true
	})
	return buf
}
