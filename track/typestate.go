package track

import (
	"time"

	"github.com/adstap/adstap/codec"
)

// typeState is what the tracker knows of one type on one stream. Its size is
// bounded by the resources of the type: the acknowledged names and hashes, the
// subscription, and the latest push; nothing here grows with the number of
// pushes.
//
// The files above it follow its fields by concern: request.go the
// subscription (requested, wildcard, explicit, sub); diff.go the
// acknowledged state (acked, baseline, gen); push.go the push awaiting its
// answer and what came of the latest one (p, ackedVersion and the rest,
// the counts, recent); round.go the question a push round answers (asked
// and the rest); detect.go the detectors' episodes; hold.go and push.go
// the bytes held for a NACK (held, rejection); resources.go res.
type typeState struct {
	url, short string
	// replaceType marks LDS and CDS, whose SotW responses always carry the
	// whole set the client needs, so a name missing from one is removed.
	replaceType bool
	// acceptTakers are the takers (lease.go) of the type's accepted
	// pushes, a bit each; supersedeTakers those of them that take a
	// push superseded before its answer too.
	acceptTakers, supersedeTakers takerSet

	// sub is what the client asks for of the type (subscription.go).
	sub subscription

	// acked is what the client accepted of the type (diff.go).
	acked acknowledged
	sc    *scratch // its stream's

	// The latest push's version and nonce are p.ev's.
	ackedVersion, ackedNonce string
	nacked                   bool // the latest answered push was rejected
	// unsure is set when frames of the stream went unobserved, until the
	// next push of the type is observed: a nonce the tap does not know may
	// then be that of a push it did not see.
	unsure     bool
	lastError  string
	fullSynced bool // the type has had its initial full sync on this stream
	// ask is the question a push round answers (round.go).
	ask asking

	pushes, acks, nacks, staleNonces, redundant, fullSyncs int

	p push // the latest push; p.state says whether there is one
	// recent is the stream's ring of latest pushes (nil before the type's
	// first push), and seq the number of p in it.
	recent *pushRing
	seq    uint64
	// ackedAt and nackedAt are when the latest ACK and NACK arrived, for
	// the ages the pages show (the latest push's is p.ev.SentAt).
	ackedAt, nackedAt time.Time

	// det is what the NACK storm and loop detectors follow (detect.go).
	det nackEpisodes
	// nack is what the type holds for a NACK of its latest push (kept.go).
	nack holding
	keep *keeper // the tracker's
	// res is the type's resources one by one (restable.go), with
	// Config.Resources; nil otherwise.
	res *resTable
}

func newTypeState(url string, sc *scratch, keep *keeper) *typeState {
	return &typeState{
		url:         url,
		short:       codec.ShortType(url),
		replaceType: codec.WholeType(url),
		sc:          sc,
		keep:        keep,

		acceptTakers:    keep.takersOf(url, false),
		supersedeTakers: keep.takersOf(url, true),
	}
}

// pending reports whether the latest push still awaits its answer (including
// one that timed out).
func (ts *typeState) pending() bool { return ts.p.state == pushOpen || ts.p.state == pushTimedOut }

// stateName follows istioctl proxy-status, with the rejection taken from the
// latest answered push.
func (ts *typeState) stateName() State {
	switch {
	case ts.pushes == 0:
		return StateNotSent
	case ts.nacked:
		return StateNACKed
	case ts.ackedNonce == ts.p.ev.Nonce:
		return StateSynced
	}
	return StateStale
}
