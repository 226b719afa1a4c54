package export

import (
	"encoding/json"
	"net/http"

	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// StreamsPage is the body of GET /debug/streams (schema in docs/debug.md).
type StreamsPage struct {
	Streams   []track.StreamState   `json:"streams"`
	Detectors []track.DetectorState `json:"detectors"`
}

// DebugStreams serves GET /debug/streams: every stream's protocol state, in
// istioctl proxy-status terms, and the detectors. ?node=ID keeps one node.
func DebugStreams(t *track.Tracker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := StreamsPage{
			Streams:   t.Streams(r.URL.Query().Get("node")),
			Detectors: t.Detectors(),
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
		if page.Detectors == nil {
			page.Detectors = []track.DetectorState{}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(page)
	})
}
