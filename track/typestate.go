package track

import "github.com/adstap/adstap/codec"

// typeState is what the tracker knows of one type on one stream. Its size is
// bounded by the resources of the type: the acknowledged names and hashes, the
// subscription, and the latest push; nothing here grows with the number of
// pushes.
//
// Past who the type is, each field is a room: a piece of the state whose
// type is declared, with its methods, in the one file that owns it, below
// this one. A room's methods change that room alone, and read another only
// when they are handed it; what goes from room to room (a push sent or
// answered, a request classified, a push kept for its NACK) is a method of
// typeState in the files above: push.go, request.go, hold.go.
type typeState struct {
	url, short string
	// acceptTakers are the takers (lease.go) of the type's accepted
	// pushes, a bit each; supersedeTakers those of them that take a
	// push superseded before its answer too.
	acceptTakers, supersedeTakers takerSet

	sub   subscription // what the client asks for (subscription.go)
	acked acknowledged // what the client accepted (diff.go)
	// p is the latest push, in flight until its answer, and the bytes it
	// holds for its NACK (inflight.go): nil before the first and once an
	// ACK applied it, unless it keeps a large push's slice for the next
	// one; sent is what outlives it, and says where it stands.
	p    *push
	sent sentPush
	out  outcome   // what came of the pushes (outcome.go)
	ask  asking    // the question a push round answers (round.go)
	det  nackWatch // what the NACK detectors follow (detect.go)
	nack holding   // what a NACK of the latest push needs beside its bytes, which p holds (kept.go)
	// res is the type's resources one by one (restable.go, kept up by
	// resources.go), with Config.Resources; nil otherwise.
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
