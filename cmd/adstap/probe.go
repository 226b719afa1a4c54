package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/adstap/adstap/internal/runconfig"
)

type probeFlags struct {
	admin, alsoReady string
	timeout          time.Duration
}

func probeCommand(f *probeFlags) *command {
	c := newCommand("probe",
		"adstap probe asks the tap in this pod (its admin address) whether it is healthy or ready; exit status 0 if it is, 1 if not.",
		"adstap probe [--admin=HOST:PORT] [healthz|readyz]")
	c.group("Probe")
	c.String(&f.admin, "admin", runconfig.DefaultAdmin, "the tap's admin `host:port` (the same ADSTAP_ADMIN as adstap run's, so one variable sets both)")
	f.timeout = time.Second
	c.Var(runconfig.Duration(&f.timeout), "timeout", "give up after this `duration` (keep it under the probe's timeoutSeconds)")
	c.String(&f.alsoReady, "also-ready", "", "then also require this `URL` to answer 200: as a native sidecar's startup probe, it holds the containers after it until, say, Envoy is ready (http://127.0.0.1:15021/healthz/ready)")
	c.epilog = "Checks:\n  healthz   the process serves (liveness)\n  readyz    the listener is open and the tap is not draining (readiness, startup; the default)\n"
	return c
}

// runProbe asks a running tap's admin server whether it is healthy or ready
// and exits 0 or 1, for Kubernetes exec probes: the image is distroless (no
// shell, no curl), and an exec probe, unlike an HTTP one, is neither
// rewritten by Istio's injector to go through istio-agent nor needs the admin
// address to listen beyond loopback.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f probeFlags
	c := probeCommand(&f)
	check, rest := "readyz", args
	if n := len(args); n > 0 && !strings.HasPrefix(args[n-1], "-") {
		check, rest = args[n-1], args[:n-1]
	}
	if code, done := c.parseArgs(rest, stdout, stderr); done {
		return code
	}
	admin, timeout, alsoReady := f.admin, f.timeout, f.alsoReady
	if check != "healthz" && check != "readyz" {
		fmt.Fprintf(stderr, "adstap probe: unknown check %q: want healthz or readyz\n", check)
		return exitUsage
	}
	if admin == "" || admin == "off" {
		fmt.Fprintln(stderr, "adstap probe: --admin is off: there is nothing to ask")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	urls := []string{"http://" + admin + "/" + check}
	if alsoReady != "" {
		if !strings.HasPrefix(alsoReady, "http://") {
			fmt.Fprintf(stderr, "adstap probe: --also-ready %q: want an http:// URL\n", alsoReady)
			return exitUsage
		}
		urls = append(urls, alsoReady)
	}
	for _, url := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			fmt.Fprintf(stderr, "adstap probe: %q: %v\n", url, err)
			return exitUsage
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintf(stderr, "adstap probe: %v\n", err)
			return exitFailure
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode != http.StatusOK {
			fmt.Fprintf(stderr, "adstap probe: %s: %s: %s\n", url, resp.Status, msg)
			return exitFailure
		}
		fmt.Fprintln(stdout, url+": "+msg)
	}
	return exitOK
}
