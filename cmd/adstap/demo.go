//go:build demo

// The demo links a control plane (go-control-plane's server and cache) and
// grpc-go's xDS client, and through them the testing package: none of it is
// in the tap that ships. `make demo` builds it in with the demo tag.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/adstap/adstap/internal/demo"
	"github.com/adstap/adstap/internal/runconfig"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f demoFlags
	cmd := demoCommand(&f)
	if code, done := cmd.parseArgs(args, stdout, stderr); done {
		return code
	}
	log, logOut, err := runconfig.NewLog(stderr, f.logLevel, f.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "adstap demo: %v\n", err)
		return exitUsage
	}
	defer runconfig.CloseLog(logOut, time.Second)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	backend, stopBackend, err := demo.StartBackend()
	if err != nil {
		fmt.Fprintf(stderr, "adstap demo: %v\n", err)
		return exitFailure
	}
	defer stopBackend()
	cpLis, err := demo.Listen()
	if err != nil {
		fmt.Fprintf(stderr, "adstap demo: %v\n", err)
		return exitFailure
	}
	cp := demo.StartControlPlane(ctx, cpLis, log, f.interval/4)
	defer cp.Stop()

	// The tap itself is exactly what `adstap run` starts.
	var rf runFlags
	runCommand(&rf).parse(nil, func(string) string { return "" })
	rf.Listen = "127.0.0.1:0"
	rf.Upstream = cp.Addr()
	rf.Admin = f.admin
	rf.RetainResources = true // so that adstap config has something to show
	t, err := startTap(rf, log, logOut)
	if err != nil {
		fmt.Fprintf(stderr, "adstap demo: %v\n", err)
		if errors.As(err, new(usageError)) {
			return exitUsage
		}
		return exitFailure
	}
	tapAddr := t.Addr().String()
	admin, adminAddr := "(admin off)", "off"
	if a := t.AdminAddr(); a != "" {
		admin, adminAddr = "http://"+a, a
	}
	fmt.Fprintf(stdout, `adstap demo: a control plane on %s, the tap on %s, two clients.
  live log:          below, one line per push outcome and per detector event
  live page:         %s/
  proxy status:      adstap status --admin %s   (go run ./cmd/adstap status ...)
  what one accepted: adstap config --admin %s --node %s --type cluster
  stream state:      curl -s %s/debug/streams
  one node:          curl -s '%s/debug/streams?node=%s'
Every %s the configuration changes; a bad cluster is pushed, NACKed (a storm), then fixed. Ctrl-C stops.

`, cp.Addr(), tapAddr, admin, adminAddr, adminAddr, demo.DeltaNode, admin, admin, demo.DeltaNode, f.interval)

	var wg sync.WaitGroup
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				log.Error("demo: "+name+" stopped", "err", err)
			}
		}()
	}
	scenario := &demo.Scenario{CP: cp, Backend: backend, Interval: f.interval, Log: log}
	run("scenario", scenario.Run)
	run("proxyless client", func(ctx context.Context) error { return demo.RunProxyless(ctx, tapAddr, log) })
	run("delta client", func(ctx context.Context) error { return demo.RunDelta(ctx, tapAddr, log) })

	code := t.wait(ctx, 5*time.Second)
	cancel()
	wg.Wait()
	return code
}
