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

// configType reports whether a type is configuration that a full push
// resends: everything but endpoints, secrets and istioctl's debug types.
func configType(url string) bool {
	switch url {
	case codec.TypeEndpoint, codec.TypeSecret:
		return false
	}
	return !strings.HasPrefix(url, "istio.io/debug")
}

// joinRound places the latest push of ts in a push round of s, and reports
// whether it made that round a new full push. A full push is counted once
// per version: two of istiod's full pushes never share one, and a control
// plane re-sending the same version after a NACK is a NACK loop (its own
// detector), not new configuration.
func (s *stream) joinRound(ts *typeState, at time.Time, version string) (fullNow bool) {
	// A control plane answers a request with the version it is at: a
	// response under another version is a push that came first (istiod
	// does not answer a Delta subscription to what its push just sent).
	asked := ts.asked && (ts.askAny || ts.askVersion == version)
	ts.asked = false
	r := &s.round
	same := r.seq != 0 && version == r.version && at.Sub(r.last) < roundGap
	if same && ts.roundSeq == r.seq && !asked {
		// A second response of the type in the round: a new push, unless
		// it is the answer to a request an earlier one took (see above).
		if ts.askedRound == r.seq {
			asked = true
		} else {
			same = false
		}
	}
	if !same {
		*r = pushRound{seq: r.seq + 1, version: version}
	}
	r.last = at
	ts.roundSeq = r.seq
	if asked {
		ts.askedRound = r.seq
	}
	p := &ts.p.ev
	p.Round = r.seq
	p.Requested = asked
	if !r.full && !asked && configType(ts.url) {
		r.full = true
		if version == "" || !s.fullCounted || version != s.lastFullVersion {
			fullNow = true
			s.fullCounted, s.lastFullVersion = true, version
			s.fullPushes++
		}
	}
	p.FullPush = r.full
	return fullNow
}
