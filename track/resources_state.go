package track

import (
	"cmp"
	"slices"
	"time"

	"github.com/adstap/adstap/codec"
)

// ResourceStatus is one resource of a client, as CSDS gives it.
type ResourceStatus struct {
	TypeURL string       `json:"type_url"`
	Name    string       `json:"name"`
	Status  ClientStatus `json:"status"`
	// Version is the accepted version; "" before one.
	Version string `json:"version,omitempty"`
	// Updated is when the accepted version arrived or, REQUESTED and
	// DOES_NOT_EXIST, since when the client asked for the resource (or when
	// it was removed).
	Updated time.Time `json:"updated,omitzero"`
	// NotSent is set for a resource reported ResourceNotSent.
	NotSent bool `json:"not_sent,omitempty"`
	// The latest rejection (NACKED) or control-plane error (RECEIVED_ERROR),
	// until the resource is accepted again: the version that failed, what
	// was said of it, and when.
	ErrorVersion string    `json:"error_version,omitempty"`
	ErrorDetails string    `json:"error_details,omitempty"`
	ErrorAt      time.Time `json:"error_at,omitzero"`
}

// TypeStatus is one type of a client, as syncz gives it.
type TypeStatus struct {
	TypeURL string `json:"type_url"`
	State   State  `json:"state"`
	// AckedVersion is the version of the latest acknowledged push.
	AckedVersion string `json:"acked_version,omitempty"`
	LastError    string `json:"last_error,omitempty"`
	// Untracked counts the resources past Config.MaxResources.
	Untracked int `json:"untracked,omitempty"`
}

// ClientResources is what one stream's client holds, resource by resource.
type ClientResources struct {
	StreamID     uint64         `json:"stream_id"`
	Node         Node           `json:"node"`
	Metadata     NodeMetadata   `json:"metadata"`
	ControlPlane string         `json:"control_plane,omitempty"`
	Protocol     codec.Protocol `json:"protocol"`
	OpenedAt     time.Time      `json:"opened_at"`
	Types        []TypeStatus   `json:"types"`
	// Resources are sorted by type URL, then name.
	Resources []ResourceStatus `json:"resources"`
}

// NodeMetadata is what of the node's metadata the per-proxy answers show.
type NodeMetadata struct {
	IstioVersion string `json:"istio_version,omitempty"`
}

// ClientResources returns the streams whose node match accepts (every
// stream for nil), sorted by stream id, with their resources (none with
// Config.Resources off) when resources is set. It locks one stream at a
// time.
func (t *Tracker) ClientResources(match func(Node) bool, resources bool) []ClientResources {
	var out []ClientResources
	for _, s := range t.sortedStreams() {
		s.mu.Lock()
		if s.closed || s.meta.Protocol == codec.Opaque || !s.hasNode || (match != nil && !match(s.node)) {
			s.mu.Unlock()
			continue
		}
		c := ClientResources{StreamID: s.meta.ID, Node: s.node, Metadata: NodeMetadata{IstioVersion: s.istioVersion},
			ControlPlane: s.controlPlane, Protocol: s.meta.Protocol, OpenedAt: s.meta.OpenedAt}
		for _, ts := range s.order {
			if !tracksResources(ts.url) {
				continue
			}
			st := TypeStatus{TypeURL: ts.url, State: ts.out.state(&ts.sent), AckedVersion: ts.out.ackedVersion, LastError: ts.out.lastError}
			if tb := ts.res; tb != nil {
				st.Untracked = tb.dropped
				if resources {
					c.Resources = tb.appendStatus(ts.url, c.Resources)
				}
			}
			c.Types = append(c.Types, st)
		}
		s.mu.Unlock()
		slices.SortFunc(c.Resources, func(a, b ResourceStatus) int {
			return cmp.Or(cmp.Compare(a.TypeURL, b.TypeURL), cmp.Compare(a.Name, b.Name))
		})
		out = append(out, c)
	}
	return out
}

func (t *resTable) appendStatus(url string, out []ResourceStatus) []ResourceStatus {
	for k, n := range t.names.names {
		e, st := &t.ents[k], t.stampOf(k)
		r := ResourceStatus{TypeURL: url, Name: n.Value(), Status: e.status, NotSent: e.notSent}
		if st.version != (name{}) {
			r.Version = st.version.Value()
		}
		if st.at != 0 {
			r.Updated = time.Unix(0, st.at)
		}
		if e.failed {
			f := t.fails[n]
			r.ErrorVersion, r.ErrorDetails, r.ErrorAt = f.version, f.message, time.Unix(0, f.at)
		}
		out = append(out, r)
	}
	return out
}
