package track

import (
	"strconv"
	"time"

	"github.com/adstap/adstap/codec"
)

// Event is something the tracker learned from the wire. Every exporter
// (live log, metrics, spans, debug pages, capture) consumes the same events.
type Event interface{ event() }

// Node is the client identity of a stream, from its first request.
type Node struct {
	ID, Cluster, UserAgent string // UserAgent is "name/version", e.g. "envoy/1.36.2"
	Region, Zone, SubZone  string
}

// RequestKind classifies a request by the protocol's rules.
type RequestKind string

const (
	KindInitial RequestKind = "initial" // empty response nonce: first request of a type, or a re-request
	KindACK     RequestKind = "ack"     // latest nonce, no error_detail
	KindNACK    RequestKind = "nack"    // latest nonce, error_detail set
	KindStale   RequestKind = "stale"   // a nonce that is not the latest sent for the type
	// KindUnobserved: a nonce the tap never saw sent, after frames of the
	// stream went unobserved (ObservationGap): most likely the answer to a
	// push that was relayed but not observed, so it is not counted as stale.
	KindUnobserved   RequestKind = "unobserved"
	KindSubscription RequestKind = "subscription" // Delta: (un)subscribe with an empty nonce, after the first request
	KindUnsubscribe  RequestKind = "unsubscribe"  // the client dropped every name of the type
)

// PushResult is how a push ended.
type PushResult string

const (
	ResultACK        PushResult = "ack"
	ResultNACK       PushResult = "nack"
	ResultSuperseded PushResult = "superseded" // a newer push of the type went out before any answer
	ResultClosed     PushResult = "closed"     // the stream ended first
	ResultTimeout    PushResult = "timeout"    // unanswered for Config.PushTimeout
)

// Diff is a push compared with the client's last acknowledged state of its type.
type Diff struct {
	Added, Removed, Changed, Unchanged int
	// Names of added, removed and changed resources, each list capped at
	// Config.MaxNames (the counts above are exact).
	AddedNames, RemovedNames, ChangedNames []string
}

// Push is one response, from the moment it crossed the tap.
type Push struct {
	StreamID uint64
	// Ref is the push's stream, for what the outputs keep of it.
	Ref       *StreamRef
	Node      Node
	TypeURL   string
	Type      string // codec.ShortType
	Version   string // version_info (SotW) or system_version_info (Delta)
	Nonce     string
	Resources int
	Bytes     int
	Diff      Diff
	FullSync  bool // carries the whole subscribed set of its type
	Initial   bool // the first full sync of the type on this stream
	First     bool // the stream's first push, of any type
	Redundant bool // changes nothing: no resource added, removed or changed
	// Replace is set when the push is the whole of its type, so that what
	// it lacks is removed (codec.Replaces).
	Replace bool
	SentAt  time.Time
	// Round is the stream's push round the push belongs to (1, 2, ...):
	// the responses a control plane sent for one change (round.go).
	Round uint64
	// FullPush is set when the round was a full push by the time of this
	// push: it resent configuration (a type other than EDS and SDS) unasked.
	FullPush bool
	// Requested is set when the push answers the client's own request (an
	// initial request, a re-request or a subscription change).
	Requested bool
	// Content identifies what was pushed, whatever the version, nonce and
	// order: an order-independent hash of the resources and removals.
	Content uint64
}

// PushID is the identity of the push round p belongs to, across streams
// and taps: the version for a full push and for a push answering the
// client's request (a sync to that version), and the version, type and
// content for any other push, since released istiod versions give an
// incremental (EDS) push the version of the last full push. It is empty
// when the version is.
func (p Push) PushID() string {
	if p.Version == "" {
		return ""
	}
	if p.FullPush || p.Requested {
		return p.Version
	}
	return p.Version + " " + p.Type + ":" + strconv.FormatUint(p.Content, 16)
}

// StreamOpened: a stream began.
type StreamOpened struct {
	Stream StreamMeta
	Ref    *StreamRef
}

// StreamClosed: a stream ended; Code and Message are the gRPC status the client got.
type StreamClosed struct {
	Stream  StreamMeta
	Ref     *StreamRef
	Node    Node
	At      time.Time
	Code    uint32
	Message string
}

// RequestSeen: a request was classified.
type RequestSeen struct {
	StreamID uint64
	Ref      *StreamRef
	Node     Node
	TypeURL  string
	Kind     RequestKind
	// SubscriptionChanged is set when the request also changed the
	// subscription (with an ACK, a NACK, a stale nonce or alone).
	SubscriptionChanged bool
	// Answers is set when the request is the answer to the type's latest
	// push: its PushEnded or LateAnswer follows at once.
	Answers bool
	Nonce   string
	At      time.Time
	// Request is the request as decoded, for an output that follows the
	// subscription (the reference check); it is not to be changed.
	Request *codec.Request
}

// PushSent: a response went to the client. Push is shared with the push's
// PushEnded or LateAnswer and with every output given the events: read it,
// keep it, never change it.
type PushSent struct{ Push *Push }

// PushEnded: a push got its outcome. Latency is from crossing the tap to the answer.
// Push is its PushSent's.
type PushEnded struct {
	Push    *Push
	Result  PushResult
	At      time.Time
	Latency time.Duration
	// Error is the NACK's error_detail; ErrorNames the pushed resource names
	// it mentions (capped at Config.MaxNames).
	ErrorCode  int32
	Error      string
	ErrorNames []string
	// Rejected is what the NACK rejected: the push's bytes and the names its
	// message mentions, for the outputs to read the Istio objects the
	// resources came from (origin.Of).
	Rejected *Rejected
	// Changed is what the push kept of the resources it added or changed,
	// for an output to read the Istio objects they came from and release
	// (Tracker.TakeChanged; nil without it, for a NACK or a timeout, or
	// when nothing was kept).
	Changed *Changed
	// Accepted is what an acknowledged push kept of its resources, for an
	// output to keep what the client accepted (an ACK's, when a taker takes
	// its type, and a superseded push's, which the tracker assumes applied,
	// when one takes those too; nil otherwise). A taker reads it through
	// its lease (Taker.Lease), never directly.
	Accepted *Accepted
}

// LateAnswer: the client answered a push after it had timed out.
type LateAnswer struct {
	Push    *Push      // its PushSent's
	Result  PushResult // ack or nack
	At      time.Time
	Latency time.Duration
	// Rejected is set for a NACK, Accepted for an ACK, as in PushEnded.
	Rejected *Rejected
	Accepted *Accepted
}

// FullSyncComplete: every type the client subscribed to at the start of the
// stream has an acknowledged push (the seed's "full sync complete").
type FullSyncComplete struct {
	StreamID uint64
	Ref      *StreamRef
	Node     Node
	At       time.Time
	Elapsed  time.Duration // from the stream opening
	Types    []string      // type URLs, sorted
}

// FullPush: a push round resent configuration the client had not asked for
// (a type other than EDS and SDS): a control plane's full push, such as
// istiod's after a config change. Counted once per stream and version; an
// endpoint-only (incremental) push and a stream's initial sync never are.
type FullPush struct {
	StreamID uint64
	Ref      *StreamRef // Ref.Meta.Protocol: SotW or Delta
	Node     Node
	Version  string
	Round    uint64
	TypeURL  string // the type that made the round a full push
	At       time.Time
	Count    int // full pushes on the stream so far
}

// DecodeError: a frame that could not be decoded; it was relayed all the same.
type DecodeError struct {
	StreamID  uint64
	Ref       *StreamRef // nil when the stream is not tracked
	Direction codec.Direction
	// TypeURL is the type of the stream's latest push, the likeliest of
	// the frame; empty before any.
	TypeURL string
	Err     error
	At      time.Time
}

// Detector names.
const (
	DetectorNACKStorm        = "nack_storm"
	DetectorNACKLoop         = "nack_loop"
	DetectorRepeatedFullSync = "repeated_full_sync"
	DetectorReconnectHerd    = "reconnect_herd"
)

// DetectorStarted: a detector's condition began to hold.
type DetectorStarted struct {
	Detector string
	Key      string     // what it is about: "stream 12 cds", "node sidecar~…", "tap"
	StreamID uint64     // 0 when not about one stream
	Ref      *StreamRef // nil when not about one stream
	Node     string
	TypeURL  string
	At       time.Time
	Count    int    // NACKs in the window, pushes in the loop, full syncs in the window, streams per second
	Detail   string // a readable sentence
}

// DetectorEnded: the condition no longer holds.
type DetectorEnded struct {
	Detector string
	Key      string
	StreamID uint64
	Ref      *StreamRef
	Node     string
	TypeURL  string
	At       time.Time
	Duration time.Duration
	Count    int // total while it held
}

func (StreamOpened) event()     {}
func (StreamClosed) event()     {}
func (RequestSeen) event()      {}
func (PushSent) event()         {}
func (PushEnded) event()        {}
func (LateAnswer) event()       {}
func (FullSyncComplete) event() {}
func (DecodeError) event()      {}
func (FullPush) event()         {}
func (DetectorStarted) event()  {}
func (DetectorEnded) event()    {}

// RefOf is the stream an event is about, nil when it is about none (or was
// made outside a tracker).
func RefOf(e Event) *StreamRef {
	if a, ok := e.(interface{ streamRef() *StreamRef }); ok {
		return a.streamRef()
	}
	return nil
}

func (e StreamOpened) streamRef() *StreamRef { return e.Ref }

func (e StreamClosed) streamRef() *StreamRef { return e.Ref }

func (e RequestSeen) streamRef() *StreamRef { return e.Ref }

func (e PushSent) streamRef() *StreamRef { return e.Push.Ref }

func (e PushEnded) streamRef() *StreamRef { return e.Push.Ref }

func (e LateAnswer) streamRef() *StreamRef { return e.Push.Ref }

func (e FullSyncComplete) streamRef() *StreamRef { return e.Ref }

func (e FullPush) streamRef() *StreamRef { return e.Ref }

func (e DecodeError) streamRef() *StreamRef { return e.Ref }

func (e DetectorStarted) streamRef() *StreamRef { return e.Ref }

func (e DetectorEnded) streamRef() *StreamRef { return e.Ref }
