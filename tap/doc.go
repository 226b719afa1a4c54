// Package tap relays xDS gRPC streams byte for byte and hands every frame to an observer on the side.
//
// Its files are in layers, each using only what the files below it declare
// (test/layers' TestFilesCallDown keeps them so): server.go (Server: its
// configuration, Serve, Shutdown, what it counts, and the handler that opens
// each stream's upstream stream) at the top, then upstream.go (the downstream
// connections, each with its upstream connection, given what they need of
// the Server as an upstreamConfig: where and how to dial, and where to report
// how the upstream came up). Below them each piece is a type with its
// methods: relay.go (a stream's two pumps), observe.go (the observation
// queue), guard.go and peek_*.go (the listener's protocol guard), limits.go,
// stats.go, connect.go (the timing of an upstream dial and the queue of its
// reports), observer.go, listen.go, tlsconfig.go and address.go.
package tap
