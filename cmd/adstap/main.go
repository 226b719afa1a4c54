// Command adstap is a transparent tap for xDS gRPC traffic.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses: 2 for anything wrong with how adstap was started (flags,
// files, addresses), 1 for a failure while running.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitNACK: adstap replay's client rejected a push.
	exitNACK = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := runCLI(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const topHelp = `adstap relays xDS gRPC streams between proxies (Envoy, istio-agent, proxyless
gRPC) and their control plane (istiod, go-control-plane) without changing a
byte, and shows what they say: pushes, ACKs, NACKs, nonces, full syncs.

Usage:
  adstap <command> [flags]

Commands:
  config    what a proxy accepted, from a running tap (run --retain-resources): adstap config --node ID --type cluster
  demo      a control plane and two clients talking through a tap on loopback: see pushes, ACKs, NACKs at once
  inspect   replay a capture file (run --capture): timeline, summary per stream, a version's diff, every NACK
  replay    serve a captured node's configuration to a real client (envoy -c, grpc-go): reproduce a NACK, bisect it to the resource
  probe     exit 0 if the tap in this pod is ready (or healthy): Kubernetes exec probes in a distroless image
  rollout   how a push round reached the fleet, from every tap's spans in Jaeger: ACKs, NACKs, time to ACK
  run       relay and observe xDS streams: adstap run --upstream=istiod.istio-system.svc:15012 ...
  status    every proxy of a running tap, as istioctl proxy-status: SYNCED, STALE, ERROR (NACK), NOT SENT
  version   print the version, commit and Go version

Every flag has an environment twin: --upstream is ADSTAP_UPSTREAM.
Run 'adstap <command> --help' for a command's flags.
`

// runCLI runs one adstap command and returns its exit status; ctx ends it
// (the signals SIGINT and SIGTERM, in main).
func runCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topHelp)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runTap(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "inspect":
		return runInspect(ctx, args[1:], stdout, stderr)
	case "replay":
		return runReplay(ctx, args[1:], stdout, stderr)
	case "probe":
		return runProbe(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "config":
		return runConfig(ctx, args[1:], stdout, stderr)
	case "rollout":
		return runRollout(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		printVersion(stdout)
		return exitOK
	case "help", "--help", "-help", "-h":
		fmt.Fprint(stdout, topHelp)
		return exitOK
	}
	fmt.Fprintf(stderr, "adstap: unknown command %q; run 'adstap --help'\n", args[0])
	return exitUsage
}
