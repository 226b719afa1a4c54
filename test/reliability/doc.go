// Package reliability is adstap's fault and load suite: real peers on
// loopback (go-control-plane, raw gRPC streams with the pass-through codec,
// a real Jaeger, an upstream in a child process that is killed with SIGKILL),
// a tap wired as `adstap run` wires it, and the checks that hold under
// disconnects, a killed upstream, a client that stops reading, a dead or
// silent OTLP collector, a NACK loop at full speed, a reconnect herd and
// malformed frames.
//
// Each test has a short form, run by `go test ./...` (and so by `make test`),
// and a long form, run when ADSTAP_SOAK=1 (`make soak`). Both log their
// measurements as "FIGURE name: value" lines, and append them as JSON lines
// to the file named by ADSTAP_FIGURES when it is set; docs/reliability.md
// records them. Tests assert correctness and only generous sanity bounds on
// time: the figures are measured, not asserted.
package reliability
