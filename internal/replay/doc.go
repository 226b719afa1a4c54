// Package replay is adstap replay: it serves what a captured node had been
// sent (an inspect.Sent, which internal/inspect reads from the capture) to a
// real xDS client over ADS, SotW or Delta, each resource's bytes as
// captured through the pass-through codec; it follows the client's answers
// through a tracker of its own into the live log, and, asked to, bisects a
// push the client rejects down to the resources it rejects on their own
// (docs/capture.md, "Replay: reproduce what a proxy was sent").
//
// Its files are in layers, each using only what the files below it declare
// (test/layers' TestFilesCallDown keeps them so): serve.go (Serve, and the
// session that replays to one client) at the top; bisect.go (the bisection
// a session runs: it says what to push each round and what it found, and
// the session pushes); words.go (the words of its lines, as adstap inspect
// says them) at the bottom.
package replay
