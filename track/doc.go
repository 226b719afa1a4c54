// Package track follows every xDS stream's ACK, NACK, nonce and version state from its decoded frames.
//
// Its files are in layers, each using only what the files below it declare,
// so that a file reads with nothing above it in mind and a change to a piece
// of state stays in the piece's file (test/layers' TestFilesCallDown fails
// on a reference back up). From the top:
//
//   - tracker.go: the Tracker, its streams and their locks, and the entry
//     point of every frame; state.go, summary.go and resources_state.go read
//     it for the pages and CSDS.
//   - What happens to a type on a stream, as methods of its typeState or
//     stream: push.go (a push sent, answered, expired or closed), detect.go
//     (the detectors), resources.go (the resources table kept up), round.go
//     (push rounds), diff.go (a push against what the client acknowledged),
//     hold.go (what a push keeps for its NACK) and request.go (a request's
//     kind and the subscription it changes).
//   - stream.go: one stream, its types, its full sync and its push round.
//   - typestate.go: typeState, one type on one stream, whose fields the files
//     above share out.
//   - The pieces of that state, each a type with its methods: kept.go (the
//     latest push's kept bytes and how an answer hands them over),
//     inflight.go (the push awaiting its answer: its resources, where each
//     is in the acknowledged state, its content), recent.go (the ring of
//     recent pushes), lease.go (accepted pushes and their leases to takers),
//     keep.go (the keeper: the bound on kept bytes and their compact form;
//     Rejected and Changed), share.go (kept bytes, once for every stream),
//     restable.go (the resources one by one), episode.go (the detectors'
//     windows and episodes) and names.go (interned names, their sets and the
//     stream's scratch space).
//   - The vocabulary: event.go, streamref.go, gap.go, config.go, states.go
//     and sink.go.
package track
