package track

import "github.com/adstap/adstap/codec"

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
	// acceptTakers are the takers (lease.go) of the type's accepted
	// pushes, a bit each; supersedeTakers those of them that take a
	// push superseded before its answer too.
	acceptTakers, supersedeTakers takerSet

	// sub is what the client asks for of the type (subscription.go).
	sub subscription

	// acked is what the client accepted of the type (diff.go).
	acked acknowledged

	p push // the latest push; p.state says whether there is one
	// out is what came of the type's pushes (outcome.go).
	out outcome
	// ask is the question a push round answers (round.go).
	ask asking

	// det is what the NACK storm and loop detectors follow (detect.go).
	det nackEpisodes
	// nack is what the type holds for a NACK of its latest push (kept.go).
	nack holding
	// res is the type's resources one by one (restable.go), with
	// Config.Resources; nil otherwise.
	res *resTable
}

// newTypeState returns the state of type url on a stream, keep being the
// tracker's keeper, which knows the takers of the type's accepted pushes.
func newTypeState(url string, keep *keeper) *typeState {
	return &typeState{
		url:   url,
		short: codec.ShortType(url),
		sub:   subscription{replaceType: codec.WholeType(url)},

		acceptTakers:    keep.takersOf(url, false),
		supersedeTakers: keep.takersOf(url, true),
	}
}
