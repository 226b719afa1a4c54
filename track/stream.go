package track

import (
	"slices"
	"sync"
	"time"

	"github.com/adstap/adstap/codec"
)

// maxTypesPerStream bounds what a client inventing type URLs can make the
// tracker hold; real clients use a dozen at most.
const maxTypesPerStream = 64

// stream is the tracked state of one relayed stream.
type stream struct {
	// mu guards everything below: a stream's frames, the sweep and the
	// debug pages take it; other streams never wait for it.
	mu      sync.Mutex
	closed  bool // no longer tracked; a sweep that got it before its close skips it
	meta    StreamMeta
	ref     *StreamRef // what the stream's events hand the outputs
	node    Node
	hasNode bool
	// defaultType is the type of a per-type (non-ADS) stream, for frames
	// that leave type_url empty.
	defaultType string
	// order is the stream's types in the order they appeared, for a stable
	// event order; a stream has a few, so a walk finds one sooner than a
	// map's hash would, and holds no map.
	order []*typeState
	sync  fullSyncClock
	// round is the push round of the latest response, and the full
	// pushes counted (round.go).
	round pushRounds
	sc    *scratch // pooled space, borrowed while the stream is locked
	keep  *keeper  // the tracker's
	// unsure: frames of the stream went unobserved; a type first seen after
	// that starts unsure too (see outcome.unsure).
	unsure bool
	// controlPlane is the control_plane.identifier of the latest response
	// that carried one: the control-plane replica serving the stream.
	controlPlane string
	// istioVersion is the node metadata's ISTIO_VERSION.
	istioVersion string
	recent       *pushRing // nil before the first push
	// lastPushType is the type URL of the latest push, what an undecodable
	// frame most likely was.
	lastPushType string
}

// fullSyncClock measures the time to full sync. Clients request types in a
// chain (EDS once clusters arrive, RDS once listeners do), so the moment every
// requested type is acknowledged is only a candidate until FullSyncSettle
// passes without a new type being requested.
type fullSyncClock struct {
	done      bool
	elapsed   time.Duration
	candidate time.Time
	pending   bool // candidate is set
	types     []string
}

func newStream(m StreamMeta, keep *keeper) *stream {
	return &stream{meta: m, ref: NewStreamRef(m), defaultType: codec.DefaultTypeOf(m.Method), sc: new(scratch), keep: keep}
}

// typeFor returns the state of a type, creating it on first sight, or nil
// once the stream has too many types.
func (s *stream) typeFor(url string) *typeState {
	if url == "" {
		url = s.defaultType
	}
	if ts := s.lookup(url); ts != nil {
		return ts
	}
	if len(s.order) >= maxTypesPerStream {
		return nil
	}
	ts := newTypeState(url, s.keep)
	ts.out.unsure = s.unsure
	s.order = append(s.order, ts)
	return ts
}

// lookup returns the state of a type the stream has seen, or nil.
func (s *stream) lookup(url string) *typeState {
	for _, ts := range s.order {
		if ts.url == url {
			return ts
		}
	}
	return nil
}

// setNode keeps the identity of the first request that carries one: later
// requests do not repeat it.
func (s *stream) setNode(n *codec.NodeIdentity) {
	if n == nil || s.hasNode {
		return
	}
	s.hasNode = true
	s.istioVersion = n.IstioVersion
	s.node = Node{ID: n.ID, Cluster: n.Cluster, Region: n.Locality.Region, Zone: n.Locality.Zone, SubZone: n.Locality.SubZone}
	switch {
	case n.UserAgentVersion != "":
		s.node.UserAgent = n.UserAgentName + "/" + n.UserAgentVersion
	default:
		s.node.UserAgent = n.UserAgentName
	}
}

// requested advances the full-sync clock after a request: a new type cancels
// the candidate, and an answer may make a new one.
func (s *stream) requested(at time.Time, ts *typeState, newType bool) {
	c := &s.sync
	if c.done {
		return
	}
	if newType && inFullSync(ts.url) {
		c.pending = false
		c.types = nil
	}
	if c.pending {
		return
	}
	if types := s.syncedTypes(); types != nil {
		c.candidate, c.pending, c.types = at, true, types
	}
}

// inFullSync reports whether a type is part of a client's configuration,
// and so of its full sync. Not istioctl's syncz, nor what istio-agent asks
// for on its own on the stream of the Envoy behind it: health (requests
// only, never answered), NDS (answered only when the proxy captures DNS) and
// PCDS (answered only in meshes with several roots). Waiting for those
// would keep the full sync of every sidecar behind an agent from completing.
func inFullSync(url string) bool {
	switch url {
	case codec.TypeSyncz, codec.TypeHealthInfo, codec.TypeNameTable, codec.TypeProxyConfig:
		return false
	}
	return true
}

// syncedTypes returns the types the client wants, sorted, when each has an
// acknowledged push and no push is waiting for an answer; nil otherwise.
// Only types inFullSync count.
func (s *stream) syncedTypes() []string {
	n := 0
	for _, ts := range s.order {
		if !inFullSync(ts.url) {
			continue
		}
		if ts.sent.pending() {
			return nil
		}
		if !ts.sub.requested || ts.sub.empty() {
			continue
		}
		if ts.out.ackedNonce == "" {
			return nil
		}
		n++
	}
	if n == 0 {
		return nil
	}
	types := make([]string, 0, n)
	for _, ts := range s.order {
		if inFullSync(ts.url) && ts.sub.requested && !ts.sub.empty() {
			types = append(types, ts.url)
		}
	}
	slices.Sort(types)
	return types
}

// settle finalizes a candidate that has stood for FullSyncSettle, or
// unconditionally when the stream ends, since no new type can come then.
func (s *stream) settle(now time.Time, settle time.Duration, closing bool, evs []Event) []Event {
	c := &s.sync
	if c.done || !c.pending || (!closing && now.Sub(c.candidate) < settle) {
		return evs
	}
	c.done, c.pending = true, false
	c.elapsed = c.candidate.Sub(s.meta.OpenedAt)
	return append(evs, FullSyncComplete{StreamID: s.meta.ID, Ref: s.ref, Node: s.node, At: c.candidate, Elapsed: c.elapsed, Types: c.types})
}
