package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/gctune"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/runconfig"
)

// runFlags are `adstap run`'s flags, defined once in internal/runconfig
// with their defaults; this command adds their environment twins and help.
type runFlags = runconfig.Flags

func runCommand(f *runFlags) *command {
	c := newCommand("run",
		"adstap run relays every xDS stream between its clients and one upstream control plane, byte for byte, and observes it.",
		"adstap run --upstream=HOST:PORT [flags]")
	runconfig.Define(c, f)
	c.epilog = runconfig.Epilog()
	return c
}

// usageError is a problem with how adstap was started: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func runTap(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f runFlags
	cmd := runCommand(&f)
	if code, done := cmd.parseArgs(args, stdout, stderr); done {
		return code
	}
	if err := f.Check(cmd.isSet); err != nil {
		fmt.Fprintf(stderr, "adstap run: %v (see adstap run --help)\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		return exitUsage
	}
	log, logOut, err := runconfig.NewLog(stderr, f.LogLevel, f.LogFormat)
	if err != nil {
		fmt.Fprintf(stderr, "adstap run: %v\n", err)
		return exitUsage
	}
	defer runconfig.CloseLog(logOut, time.Second) // after wait, which closes it within the drain
	gc := gctune.Apply(osEnv, gctune.SystemCgroup())
	defer gctune.Start(gc, gcInterval, log)()
	t, err := startTap(f, log, logOut)
	if err != nil {
		fmt.Fprintf(stderr, "adstap run: %v\n", err)
		if errors.As(err, new(usageError)) {
			return exitUsage
		}
		return exitFailure
	}
	logGC(log, gc)
	return t.wait(ctx, f.DrainTimeout)
}

// gcInterval is how often the collector's settings are looked at again
// (gctune.Start): four samples an interval.
const gcInterval = time.Second

// logGC says how the garbage collector was set, since it decides how much
// memory the tap may take (internal/gctune).
func logGC(log *slog.Logger, s gctune.Settings) {
	limit := "none"
	if s.MemoryLimit != math.MaxInt64 {
		b := runconfig.ByteSize(s.MemoryLimit)
		limit = b.String()
	}
	attrs := []any{"gc_percent", s.Percent, "gc_percent_from", s.PercentSource, "memory_limit", limit, "memory_limit_from", s.LimitSource}
	if s.PercentSource != "GOGC" {
		// The percent falls towards 100 past this much live heap and stacks,
		// and under a steady flow the headroom holds this long of it.
		attrs = append(attrs, "gc_extra_headroom_mib", gctune.ExtraHeadroom>>20,
			"gc_flow_headroom", (gctune.FlowIntervals * gcInterval).String())
	}
	log.Info("garbage collector", attrs...)
}

// runningTap is a started tap: the relay, its observation, its listener
// and its admin and metrics servers (internal/pipeline), with the log.
type runningTap struct {
	*pipeline.Running
	log    *slog.Logger
	logOut *export.LogWriter // nil when the log is written in place
}

// startTap checks the configuration, opens every listener, and starts
// serving. Everything that can be wrong with the configuration fails here,
// before the first client connects.
func startTap(f runFlags, log *slog.Logger, logOut *export.LogWriter) (*runningTap, error) {
	run, err := runconfig.Build(f, runconfig.Env{Logger: log, LogOut: logOut, Version: currentBuild().Version, Getenv: osEnv})
	if err != nil {
		return nil, usageError{err}
	}
	running, err := pipeline.Start(context.Background(), run)
	if err != nil {
		// A ListenError names its flag already.
		return nil, usagef("%v", err)
	}
	attrs := []any{"listen", running.Addr().String(), "upstream", run.Tap.Upstream.String(), "upstream_tls", run.Tap.UpstreamTLS != nil, "listen_tls", run.Tap.ListenTLS != nil, "tracing", running.Tracing != nil}
	if a := running.AdminAddr(); a != "" {
		attrs = append(attrs, "admin", "http://"+a)
	}
	if a := running.MetricsAddr(); a != "" {
		attrs = append(attrs, "metrics", "http://"+a+"/metrics")
	}
	if a := running.CSDSAddr(); a != "" {
		attrs = append(attrs, "csds", a)
	}
	log.Info("adstap relaying", attrs...)
	return &runningTap{Running: running, log: log, logOut: logOut}, nil
}

// wait serves until ctx ends, then drains: streams end with Unavailable so
// clients reconnect elsewhere, and the process exits within drainTimeout.
func (t *runningTap) wait(ctx context.Context, drainTimeout time.Duration) int {
	code := exitOK
	select {
	case <-t.Done():
		if err := t.Err(); err != nil {
			t.log.Error("serving stopped", "err", err)
			code = exitFailure
		}
	case <-ctx.Done():
		t.log.Info("draining: ending open streams so clients reconnect", "drain_timeout", drainTimeout)
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	if err := t.Close(drainCtx); err != nil {
		t.log.Warn("observation did not stop cleanly", "err", err)
	}
	t.log.Info("stopped")
	if t.logOut != nil {
		// What the log still holds goes out within what is left of the drain.
		t.logOut.Close(drainCtx)
	}
	return code
}
