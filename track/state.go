package track

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/adstap/adstap/codec"
)

// StreamState is a stream as the /debug/streams page shows it.
type StreamState struct {
	ID          uint64 `json:"id"`
	ConnID      uint64 `json:"conn_id"`
	NodeID      string `json:"node_id"`
	NodeCluster string `json:"node_cluster,omitempty"`
	UserAgent   string `json:"user_agent,omitempty"`
	// IstioVersion is ISTIO_VERSION from the node's metadata.
	IstioVersion string `json:"istio_version,omitempty"`
	// ControlPlane is the control_plane.identifier of the latest response
	// that carried one (istiod sends a JSON object naming its pod).
	ControlPlane string         `json:"control_plane,omitempty"`
	Peer         string         `json:"peer"`
	Method       string         `json:"method"`
	Protocol     codec.Protocol `json:"protocol"`
	OpenedAt     time.Time      `json:"opened_at"`
	// FullSyncSeconds is the time to full sync, null until it is known.
	FullSyncSeconds *float64 `json:"full_sync_seconds"`
	// FullPushes counts the control plane's full pushes on the stream:
	// push rounds that resent configuration unasked (track.FullPush).
	FullPushes int                   `json:"full_pushes"`
	Types      map[string]*TypeState `json:"types"` // by type URL
}

// TypeState is one type of a stream.
type TypeState struct {
	// State follows istioctl proxy-status: NACKED when the latest answered
	// push was rejected, NOT_SENT before any push, SYNCED when the last
	// acknowledged nonce is the last sent one, STALE otherwise.
	State            State  `json:"state"`
	Type             string `json:"type"` // the short name: cds, eds, ... (codec.ShortType)
	LastSentVersion  string `json:"last_sent_version"`
	LastSentNonce    string `json:"last_sent_nonce"`
	LastAckedVersion string `json:"last_acked_version"`
	LastAckedNonce   string `json:"last_acked_nonce"`
	LastError        string `json:"last_error,omitempty"`
	// LastSentAt, LastACKAt and LastNACKAt: when the latest push went out,
	// and the latest ACK and NACK came back; absent until then.
	LastSentAt time.Time `json:"last_sent_at,omitzero"`
	LastACKAt  time.Time `json:"last_ack_at,omitzero"`
	LastNACKAt time.Time `json:"last_nack_at,omitzero"`
	// LastRejected is what the last NACK rejected, until an ACK.
	LastRejected *Rejected `json:"-"`
	// LastErrorSource is LastRejected as /debug/streams shows it: the
	// rejected resources and the Istio objects they came from, as
	// origin.Rejection writes them. page.StreamsHandler fills it in.
	LastErrorSource json.RawMessage `json:"last_error_source,omitempty"`
	Pushes          int             `json:"pushes"`
	ACKs            int             `json:"acks"`
	NACKs           int             `json:"nacks"`
	StaleNonces     int             `json:"stale_nonces"`
	RedundantPushes int             `json:"redundant_pushes"`
	FullSyncs       int             `json:"full_syncs"`
	// Subscribed is ["*"] for a wildcard subscription (followed by any names
	// also subscribed explicitly), capped at Config.MaxNames entries, the
	// last of which then says "+N more".
	Subscribed []string `json:"subscribed"`
	Resources  int      `json:"resources"` // in the acknowledged state
}

// DetectorState is an episode in progress (Active), or, with an empty Key, a
// detector's summary: Count episodes since the tracker started, the last of
// which started at Since.
type DetectorState struct {
	Detector string    `json:"detector"`
	Key      string    `json:"key"`
	Node     string    `json:"node"`
	TypeURL  string    `json:"type_url"`
	StreamID uint64    `json:"stream_id"`
	Since    time.Time `json:"since"`
	Count    int       `json:"count"`
	Active   bool      `json:"active"`
}

// Streams returns a copy of every stream's state, or of the streams of one
// node id, sorted by stream id.
func (t *Tracker) Streams(nodeFilter string) []StreamState {
	out := []StreamState{}
	for _, s := range t.sortedStreams() {
		s.mu.Lock()
		if s.closed || (nodeFilter != "" && s.node.ID != nodeFilter) {
			s.mu.Unlock()
			continue
		}
		st := StreamState{
			ID: s.meta.ID, ConnID: s.meta.ConnID, NodeID: s.node.ID, NodeCluster: s.node.Cluster,
			UserAgent: s.node.UserAgent, IstioVersion: s.istioVersion, ControlPlane: s.controlPlane, Peer: s.meta.Peer, Method: s.meta.Method, Protocol: s.meta.Protocol,
			OpenedAt: s.meta.OpenedAt, FullPushes: s.round.fullPushes, Types: make(map[string]*TypeState, len(s.order)),
		}
		if s.sync.done {
			secs := s.sync.elapsed.Seconds()
			st.FullSyncSeconds = &secs
		}
		for _, ts := range s.order {
			st.Types[ts.url] = ts.state(t.cfg.MaxNames)
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	return out
}

func (ts *typeState) state(maxNames int) *TypeState {
	return &TypeState{
		State:            ts.out.state(&ts.sent),
		Type:             ts.short,
		LastSentVersion:  ts.sent.version,
		LastSentNonce:    ts.sent.nonce,
		LastAckedVersion: ts.out.ackedVersion,
		LastAckedNonce:   ts.out.ackedNonce,
		LastError:        ts.out.lastError,
		LastSentAt:       ts.sent.at,
		LastACKAt:        ts.out.ackedAt,
		LastNACKAt:       ts.out.nackedAt,
		LastRejected:     ts.nack.rejection,
		Pushes:           int(ts.out.pushes),
		ACKs:             int(ts.out.acks),
		NACKs:            int(ts.out.nacks),
		StaleNonces:      int(ts.out.staleNonces),
		RedundantPushes:  int(ts.out.redundant),
		FullSyncs:        int(ts.out.fullSyncs),
		Subscribed:       ts.subscribedNames(maxNames),
		Resources:        len(ts.acked.names),
	}
}

func (ts *typeState) subscribedNames(maxNames int) []string {
	names := make([]string, 0, len(ts.sub.names)+1)
	for _, n := range ts.sub.names {
		names = append(names, n.Value())
	}
	slices.Sort(names)
	if ts.sub.wildcard {
		names = slices.Insert(names, 0, "*")
	}
	return capList(names, maxNames)
}

// capList shortens a list to maxNames entries, the last of which says how
// many were left out.
func capList(names []string, maxNames int) []string {
	if len(names) <= maxNames {
		return names
	}
	keep := maxNames - 1
	return append(names[:keep:keep], "+"+strconv.Itoa(len(names)-keep)+" more")
}

// Detectors returns the episodes in progress, sorted by detector and key,
// followed by one summary row per detector.
func (t *Tracker) Detectors() []DetectorState {
	t.det.mu.Lock()
	defer t.det.mu.Unlock()
	out := make([]DetectorState, 0, len(t.det.active)+len(detectorOrder))
	for ep := range t.det.active {
		out = append(out, DetectorState{
			Detector: ep.detector, Key: ep.key, Node: ep.node, TypeURL: ep.typeURL, StreamID: ep.streamID,
			Since: ep.since, Count: ep.count, Active: true,
		})
	}
	slices.SortFunc(out, func(a, b DetectorState) int {
		if c := strings.Compare(a.Detector, b.Detector); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	for _, name := range detectorOrder {
		out = append(out, DetectorState{Detector: name, Since: t.det.lastStarted[name], Count: t.det.started[name]})
	}
	return out
}

// KeptStats is what the keeper holds and has had to give up.
type KeptStats struct {
	Bytes   int64  // held now, awaiting an answer or an output's reading (Rejected, Changed, Accepted)
	Skipped uint64 // pushes not kept because Config.KeepBytes was reached
}

// Kept returns the keeper's figures, for metrics.
func (t *Tracker) Kept() KeptStats {
	return KeptStats{Bytes: t.keep.held.Load(), Skipped: t.keep.skipped.Load()}
}

// RecentPushes returns the latest pushes of a stream (at most RecentPushes),
// oldest first, and whether the stream is tracked.
func (t *Tracker) RecentPushes(streamID uint64) ([]PushRecord, bool) {
	s := t.lock(streamID)
	if s == nil {
		return nil, false
	}
	defer s.unlock()
	return s.recent.records(), true
}

// Awaiting reports the push of a type on a stream that awaits its answer
// (one that timed out still does): its nonce and when it was sent. ok is
// false when none does: nothing was sent, or the latest push was answered,
// or the stream is gone. The tracker is the one judge of which push awaits
// its answer; whoever serves pushes asks it rather than keeping its own.
func (t *Tracker) Awaiting(streamID uint64, typeURL string) (nonce string, sentAt time.Time, ok bool) {
	s := t.lock(streamID)
	if s == nil {
		return "", time.Time{}, false
	}
	defer s.unlock()
	ts := s.lookup(typeURL)
	if ts == nil || !ts.sent.pending() {
		return "", time.Time{}, false
	}
	return ts.sent.nonce, ts.sent.at, true
}
