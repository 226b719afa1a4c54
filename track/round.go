package track

import (
	"strings"
	"time"

	"github.com/adstap/adstap/codec"
)

// roundGap is the longest pause between two responses of one push round:
// istiod sends a proxy's responses of one push, and its answers to the
// requests that come in meanwhile, from one goroutine, back to back; its
// next push comes after its debounce (PILOT_DEBOUNCE_AFTER, 100 ms), from
// the change that triggers it. Half the debounce leaves a margin for the
// time frames wait to be observed.
const roundGap = 50 * time.Millisecond

// A push round is what a control plane sends a stream for one change: istiod
// sends every type a push touches, one response each, under one version,
// within moments (CDS, EDS, LDS, RDS, ... in that order). Rounds are told
// apart on the wire, with nothing but the responses and the requests between
// them:
//
//   - a response under another version_info than the round's starts a new
//     round (istiod: a new push context; go-control-plane: a new snapshot);
//   - so does a response more than roundGap after the round's previous one:
//     a control plane sends the responses of one push back to back, and
//     released istiod versions send an incremental push under the version
//     of the last full push;
//   - and a second response of a type the round already sent, unless the
//     client asked for it (istiod answers a changed EDS or RDS subscription
//     during a push with the push's version). When the client's request
//     crossed the tap before the push's own response of the type, that
//     response took the ask: a second one within roundGap is the answer.
//
// A big push whose generation pauses longer than roundGap between two types
// splits into two rounds of one version; that costs nothing, since a full
// push is counted once per version and identified by its version.
//
// A round is a full push when it resends configuration the client did not
// ask for: a response of a type other than EDS and SDS (and istioctl's
// syncz) that answers no request of the client. istiod's full pushes reach
// a SotW client as CDS and LDS whole, plus RDS and the EDS of changed
// clusters, and a Delta client as CDS and LDS with what changed: neither
// sends every subscribed type whole again, so a full push is recognised by
// this shape, not by completeness. Its endpoint-only pushes are EDS alone:
// incremental, never full. The initial sync of a stream answers the
// client's requests, so it is no full push either: a reconnect is expected
// (istiod closes every stream every 30 minutes).
type pushRound struct {
	seq     uint64 // 1 for the stream's first round
	version string
	last    time.Time // the round's latest response
	full    bool
}

// pushRounds is a stream's push rounds: the latest, and the full pushes
// counted, the last of which had lastFullVersion.
type pushRounds struct {
	pushRound
	fullPushes      int
	lastFullVersion string
	fullCounted     bool
}

// asking is, for one type of a stream, the question a push round answers.
// asked is set by a request that wants an answer (initial, re-request,
// subscription change) until the next response of the type, which answers
// it if it carries askVersion, the version of the stream's push round when
// the client asked (any version, askAny, before the first). roundSeq is the
// push round of the type's latest response; askedRound the latest round in
// which a response of the type answered a request.
type asking struct {
	askVersion           string
	roundSeq, askedRound uint64
	asked, askAny        bool
}

// ask records a request of the type that wants an answer, or (want false,
// an unsubscribe) one that asks for nothing; r is the stream's latest
// push round.
func (q *asking) ask(want bool, r *pushRound) {
	q.asked = want
	q.askVersion, q.askAny = r.version, r.seq == 0
}

// configType reports whether a type is configuration that a full push
// resends: everything but endpoints, secrets and istioctl's debug types.
func configType(url string) bool {
	switch url {
	case codec.TypeEndpoint, codec.TypeSecret:
		return false
	}
	return !strings.HasPrefix(url, "istio.io/debug")
}

// join places a type's latest push, ev, in a push round of the stream, q
// being what the type asked, and reports whether the push made that round
// a new full push. A full push is counted once per version: two of
// istiod's full pushes never share one, and a control plane re-sending the
// same version after a NACK is a NACK loop (its own detector), not new
// configuration.
func (r *pushRounds) join(q *asking, ev *Push, at time.Time, version string) (fullNow bool) {
	// A control plane answers a request with the version it is at: a
	// response under another version is a push that came first (istiod
	// does not answer a Delta subscription to what its push just sent).
	asked := q.asked && (q.askAny || q.askVersion == version)
	q.asked = false
	same := r.seq != 0 && version == r.version && at.Sub(r.last) < roundGap
	if same && q.roundSeq == r.seq && !asked {
		// A second response of the type in the round: a new push, unless
		// it is the answer to a request an earlier one took (see above).
		if q.askedRound == r.seq {
			asked = true
		} else {
			same = false
		}
	}
	if !same {
		r.pushRound = pushRound{seq: r.seq + 1, version: version}
	}
	r.last = at
	q.roundSeq = r.seq
	if asked {
		q.askedRound = r.seq
	}
	ev.Round = r.seq
	ev.Requested = asked
	if !r.full && !asked && configType(ev.TypeURL) {
		r.full = true
		if version == "" || !r.fullCounted || version != r.lastFullVersion {
			fullNow = true
			r.fullCounted, r.lastFullVersion = true, version
			r.fullPushes++
		}
	}
	ev.FullPush = r.full
	return fullNow
}
