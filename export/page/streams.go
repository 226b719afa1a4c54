package page

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// Streams is the body of GET /debug/streams (schema in docs/debug.md).
type Streams struct {
	// Now is the tap's clock when the page was made, for the ages of the
	// times below whatever the reader's clock says.
	Now       time.Time             `json:"now"`
	Streams   []track.StreamState   `json:"streams"`
	Detectors []track.DetectorState `json:"detectors"`
	// Upstream is how the tap's connections to its control plane fare.
	Upstream upstream.State `json:"upstream"`
	// Dangling are the references that dangle now in what the streams'
	// clients accepted; absent when references are not checked.
	Dangling []references.DanglingReference `json:"dangling_references,omitzero"`
}

// StreamFilter keeps the streams of one node, and the types of one type
// and state; empty fields keep everything.
type StreamFilter struct {
	Node  string
	Type  string // a short name (cds) or a type URL
	State track.State
}

// ParseStreamFilter reads ?node=&type=&state= of /debug/streams.
func ParseStreamFilter(q map[string][]string) (StreamFilter, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := StreamFilter{Node: get("node"), Type: get("type")}
	if s := get("state"); s != "" {
		// adstap status's words for the same states are taken too.
		st, ok := track.ParseState(s)
		if !ok {
			var want []string
			for _, st := range track.States {
				want = append(want, string(st))
			}
			return f, fmt.Errorf("state %q: want one of %s", s, strings.Join(want, ", "))
		}
		f.State = st
	}
	return f, nil
}

// matchesType reports whether a type URL is the one a filter names.
func matchesType(url, want string) bool {
	return want == "" || url == want || codec.ShortType(url) == want
}

// Apply keeps what the filter asks for. With a type or state, a stream
// keeps only its matching types, and a stream left with none is dropped.
func (f StreamFilter) Apply(streams []track.StreamState) []track.StreamState {
	if f.Type == "" && f.State == "" {
		return streams
	}
	out := streams[:0]
	for _, s := range streams {
		for url, ts := range s.Types {
			if !matchesType(url, f.Type) || (f.State != "" && ts.State != f.State) {
				delete(s.Types, url)
			}
		}
		if len(s.Types) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// StreamsHandler serves GET /debug/streams: every stream's protocol state, in
// istioctl proxy-status terms, and the detectors. ?node=ID keeps one node,
// ?type=cds one type, ?state=NACKED the types in that state. up, which may
// be nil, says how the connections to the control plane fare; with refs, it
// shows the dangling references too.
func StreamsHandler(t *track.Tracker, up *upstream.Health, refs ...*references.References) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := ParseStreamFilter(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		page := Streams{
			Now:       time.Now(),
			Streams:   f.Apply(t.Streams(f.Node)),
			Detectors: t.Detectors(),
			Upstream:  up.State(),
		}
		// What each type's last NACK rejected is read here, on the page's
		// goroutine, not under the tracker's lock.
		for _, s := range page.Streams {
			for _, ts := range s.Types {
				if x := origin.Of(ts.LastRejected); x != nil {
					ts.LastErrorSource, _ = json.Marshal(x)
				}
			}
		}
		if page.Streams == nil {
			page.Streams = []track.StreamState{}
		}
		for _, x := range refs {
			shown := map[uint64]bool{}
			for _, s := range page.Streams {
				shown[s.ID] = true
			}
			page.Dangling = []references.DanglingReference{}
			for _, d := range x.Dangling(r.Context(), f.Node) {
				// With a type or state filter, only the streams shown.
				if shown[d.Stream] || (f.Type == "" && f.State == "") {
					page.Dangling = append(page.Dangling, d)
				}
			}
		}
		if page.Detectors == nil {
			page.Detectors = []track.DetectorState{}
		}
		shared.WriteJSON(w, page)
	})
}

// pushesPage is the body of GET /debug/pushes?stream=ID.
type pushesPage struct {
	Now    time.Time          `json:"now"`
	Stream uint64             `json:"stream"`
	Pushes []track.PushRecord `json:"pushes"` // oldest first, at most track.RecentPushes
}

// PushesHandler serves GET /debug/pushes?stream=ID: the stream's latest pushes
// and how each ended, for the live page's timeline.
func PushesHandler(t *track.Tracker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.URL.Query().Get("stream"), 10, 64)
		if err != nil {
			http.Error(w, "want ?stream=ID (stream ids are on /debug/streams)", http.StatusBadRequest)
			return
		}
		pushes, ok := t.RecentPushes(id)
		if !ok {
			http.Error(w, fmt.Sprintf("no stream %d (it may have ended)", id), http.StatusNotFound)
			return
		}
		shared.WriteJSON(w, pushesPage{Now: time.Now(), Stream: id, Pushes: pushes})
	})
}
