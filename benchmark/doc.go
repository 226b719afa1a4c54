// Package benchmark measures adstap against the floor and against the usual
// alternative, in one run: each workload goes over five paths, alternated
// within the run.
//
//  1. direct: the load generator's client talks to its upstream (the floor);
//  2. relay: through a plain pass-through relay with one upstream connection
//     per client connection, gRPC's defaults, no observation (the floor of
//     any relay that keeps one upstream connection per client);
//  3. tap: adstap as `adstap run` ships, its configuration built from the
//     command's default flags by the function the command uses
//     (runconfig.Build) and started by pipeline.Start, its log to
//     /dev/null, tracing off as shipped; a test ties the two;
//  4. tap-lean: the same with every optional output off (the reference
//     check), to show what the defaults cost;
//  5. typed: through a relay that unmarshals and re-marshals every message
//     with the generated xDS types, as istio-agent's xDS proxy does.
//
// The upstream and the clients are raw gRPC peers that send pre-encoded
// messages, so the load generator is never what is measured: the clients
// check every message they receive against the xxhash of what the upstream
// sent, and the upstream counts every ACK. The middle of paths 2–5 runs as a
// separate process (see Child), so its CPU time and resident memory are its
// own. Asked for, two more paths: tap-traced (tap with tracing, to an
// exporter that discards spans) and tap-off (the relay with no observer).
// W7 runs over the relay and the adstap binary; `adstap-bench compare`
// over the relay and two adstap binaries, each with its default flags.
//
// cmd/adstap-bench is the harness (`make bench`); the tests here run every
// workload in a tiny form over every path and check correctness only,
// never speed.
package benchmark
