package main

import (
	"time"

	"github.com/adstap/adstap/internal/runconfig"
)

// The demo's flags are known without the demo tag too, so that the tests
// of every subcommand's flags (and of the docs that name them) see them.

type demoFlags struct {
	interval            time.Duration
	admin               string
	logLevel, logFormat string
}

func demoCommand(f *demoFlags) *command {
	c := newCommand("demo",
		"adstap demo runs a small mesh on loopback — a go-control-plane server, grpc-go's xDS client (SotW) and an Envoy-like Delta client — talking through a real tap, with configuration that changes, breaks and heals, so you see pushes, diffs, ACKs, NACKs, a NACK storm and recovery in the live log.",
		"adstap demo [flags]")
	c.group("Demo")
	f.interval = 3 * time.Second
	c.Var(runconfig.Duration(&f.interval), "interval", "change the configuration every `duration`")
	c.String(&f.admin, "admin", runconfig.DefaultAdmin, "admin HTTP `host:port` (the live page at /, /debug/streams, /metrics, /healthz, /readyz)")
	c.group("Logging")
	c.String(&f.logLevel, "log-level", runconfig.DefaultLogLevel, "`level`: debug, info, warn or error")
	c.String(&f.logFormat, "log-format", runconfig.DefaultLogFormat, "`format` of the live log on stderr: text or json")
	return c
}
