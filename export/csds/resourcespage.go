package csds

import (
	"net/http"
	"strconv"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/track"
)

// ResourcesPage is the body of GET /debug/resources: each stream's
// resources, one by one, as CSDS gives them.
type ResourcesPage struct {
	Now     time.Time         `json:"now"`
	Streams []StreamResources `json:"streams"`
}

// StreamResources is one stream's resources.
type StreamResources struct {
	Stream    uint64                 `json:"stream"`
	NodeID    string                 `json:"node_id"`
	Resources []track.ResourceStatus `json:"resources"`
}

// ResourcesHandler serves GET /debug/resources[?node=ID][&stream=ID][&type=cds][&problems=1]:
// every resource of every stream (of one node; of one type, by short name or
// type URL), or with problems=1 only those not ACKED nor REQUESTED (NACKED,
// DOES_NOT_EXIST, RECEIVED_ERROR). Resources are followed one by one only
// with per-resource tracking on (--initial-fetch-timeout or --csds-listen).
func ResourcesHandler(t *track.Tracker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		node, typ, problems, stream := q.Get("node"), q.Get("type"), q.Get("problems") != "", q.Get("stream")
		var match func(track.Node) bool
		if node != "" {
			match = func(n track.Node) bool { return n.ID == node }
		}
		page := ResourcesPage{Now: time.Now(), Streams: []StreamResources{}}
		for _, c := range t.ClientResources(match, true) {
			if stream != "" && stream != strconv.FormatUint(c.StreamID, 10) {
				continue
			}
			s := StreamResources{Stream: c.StreamID, NodeID: c.Node.ID, Resources: []track.ResourceStatus{}}
			for _, res := range c.Resources {
				if typ != "" && res.TypeURL != typ && codec.ShortType(res.TypeURL) != typ {
					continue
				}
				if problems && !res.Status.Problem() {
					continue
				}
				s.Resources = append(s.Resources, res)
			}
			page.Streams = append(page.Streams, s)
		}
		shared.WriteJSON(w, page)
	})
}
