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
//   - What goes from room to room of a type on a stream, as methods of its
//     typeState: push.go (a push sent, answered, expired or closed),
//     request.go (a request's kind and the subscription it changes) and
//     hold.go (what a push keeps for its NACK); and resources.go, which keeps
//     the type's resources table up from its requests and answers.
//   - stream.go: one stream, its types and its full sync.
//   - typestate.go: typeState, one type on one stream: who it is, and its
//     rooms, a field each.
//   - The rooms, each a type declared with its methods in the one file that
//     owns it. A room's methods change that room alone, and read another
//     only when it is handed to them and listed after it: outcome.go (outcome: what came of the
//     pushes, the counts, the timeline's record), round.go (asking: the
//     question a push round answers; and the stream's push rounds),
//     detect.go (nackWatch: what the NACK detectors follow of a type; and
//     the tap-wide detectors), kept.go (holding: what a type holds for a
//     NACK, the latest push's kept bytes and how an answer hands them over),
//     diff.go (acknowledged: what the client accepted, and a push's diff
//     against it), subscription.go (subscription: what the client asks
//     for), inflight.go (push: the push awaiting its answer, its resources,
//     where each is in the acknowledged state, its content) and restable.go
//     (resTable: the resources one by one).
//   - What the rooms are made of: recent.go (the ring of recent pushes),
//     lease.go (accepted pushes and their leases to takers), keep.go (the
//     keeper: the bound on kept bytes and their compact form; Rejected and
//     Changed), share.go (kept bytes, once for every stream), episode.go (the
//     detectors' windows and episodes), names.go (interned names, their
//     sets and the stream's scratch space) and sharedstate.go (lists of
//     names shared tap-wide by content, read-only, copied while a pass
//     changes them).
//   - The vocabulary: event.go, streamref.go, gap.go, config.go, states.go
//     and sink.go.
package track
