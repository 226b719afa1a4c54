package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/adstap/adstap/internal/inspect"
	"github.com/adstap/adstap/internal/replay"
	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/tap"
)

type replayFlags struct {
	listen         string
	node           string
	at             inspect.Point
	bisect         string
	printBootstrap bool
	settle         time.Duration
	answerTimeout  time.Duration
}

func replayCommand(f *replayFlags) *command {
	c := newCommand("replay",
		"adstap replay serves, to the xDS client that connects, the configuration a captured node had been sent as of a version, a push round or a time: every type, each resource's bytes as captured. It prints each push and the client's answer, and exits 0 when the client accepts everything, 3 when it rejects a push. With --bisect it narrows a rejected push down to the resources the client rejects on their own.",
		"adstap replay [flags] FILE...")
	c.group("Where")
	c.String(&f.listen, "listen", "127.0.0.1:15010", "serve ADS (SotW and Delta) on this `address`: host:port or unix:///path/to/socket")
	c.group("What (default: the only node, as of the end of the capture)")
	c.String(&f.node, "node", "", "the captured node `id` to replay (adstap inspect --summary-only lists them)")
	c.String(&f.at.Version, "at", "", "as of the last push of this `version` (adstap inspect --nacks shows the rejected version)")
	c.String(&f.at.PushID, "push", "", "as of the last push of this push `id` (xds.push_id)")
	c.Var(timeValue{&f.at.Time}, "time", "as of this `time`: RFC 3339 (2026-11-30T10:20:00Z) or a duration before now (15m)")
	c.group("How")
	f.settle, f.answerTimeout = replay.DefaultSettle, replay.DefaultAnswerTimeout
	c.String(&f.bisect, "bisect", "", "on a NACK of this `type` (cds, lds, rds, eds, ... or a type URL), push halves of the rejected resources until the smallest set the client still rejects")
	c.Bool(&f.printBootstrap, "print-bootstrap", false, "print an Envoy bootstrap (YAML) with the captured node's id, cluster and metadata and --listen as its ADS server, and exit: envoy -c it while adstap replay serves")
	c.Var(runconfig.Duration(&f.settle), "settle", "once the client has answered every push, wait this `duration` for it to ask for the types it has not asked for yet")
	c.Var(runconfig.Duration(&f.answerTimeout), "answer-timeout", "give up on a client that leaves a push unanswered, or asks for nothing, for this `duration`")
	c.epilog = strings.TrimPrefix(replayExamples, "\n")
	return c
}

const replayExamples = `
Examples:
  adstap replay --at=2026-11-30T10:20:50Z/42 xds.capture
  adstap replay --node=sidecar~10.0.0.1~reviews-v1-7d9f.default~default.svc.cluster.local --bisect=cds xds.capture
  adstap replay --print-bootstrap --at=v3 xds.capture > envoy.yaml && adstap replay --at=v3 xds.capture &
  envoy -c envoy.yaml

Exit status: 0 the client accepted every push, 3 it rejected one, 2 bad flags,
a capture without the node or version asked for, or a client of another kind
than the captured one, 1 a client that left or stopped answering. More:
docs/capture.md.
`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f replayFlags
	cmd := replayCommand(&f)
	flagArgs, files := splitArgs(cmd.fs, args)
	if code, done := cmd.parseArgs(flagArgs, stdout, stderr); done {
		return code
	}
	if err := checkReplayFlags(&f, files); err != nil {
		fmt.Fprintf(stderr, "adstap replay: %v (see adstap replay --help)\n", err)
		return exitUsage
	}
	addr, err := tap.ParseAddress(f.listen)
	if err != nil {
		fmt.Fprintf(stderr, "adstap replay: --listen: %v\n", err)
		return exitUsage
	}
	sent, err := inspect.ReadSent(ctx, files, f.node, f.at, stderr)
	if err != nil {
		return replayFailed(stderr, err)
	}
	if f.printBootstrap {
		y, err := inspect.Bootstrap(sent, f.listen)
		if err != nil {
			return replayFailed(stderr, err)
		}
		fmt.Fprint(stdout, y)
		return exitOK
	}
	lis, err := tap.Listen(addr)
	if err != nil {
		fmt.Fprintf(stderr, "adstap replay: --listen: %v\n", err)
		return exitUsage
	}
	outcome, err := replay.Serve(ctx, replay.ServeConfig{
		Sent: sent, Listener: lis, Bisect: f.bisect,
		Settle: f.settle, AnswerTimeout: f.answerTimeout,
		Out: stdout,
	})
	if err != nil {
		code := replayFailed(stderr, err)
		if code == exitFailure && outcome != nil && len(outcome.Rejected) > 0 {
			return exitNACK
		}
		return code
	}
	if len(outcome.Rejected) > 0 {
		return exitNACK
	}
	return exitOK
}

func replayFailed(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "adstap replay: %v\n", err)
	if errors.As(err, new(*inspect.InputError)) {
		return exitUsage
	}
	return exitFailure
}

func checkReplayFlags(f *replayFlags, files []string) error {
	n := 0
	for _, set := range []bool{f.at.Version != "", f.at.PushID != "", !f.at.Time.IsZero()} {
		if set {
			n++
		}
	}
	switch {
	case len(files) == 0:
		return errors.New("name at least one capture FILE")
	case n > 1:
		return errors.New("--at, --push and --time exclude each other")
	}
	if t := f.bisect; t != "" {
		if short, ok := configTypes[strings.ToLower(t)]; ok {
			f.bisect = short
		} else if !strings.Contains(t, "/") {
			return fmt.Errorf("--bisect %q: want a short name (cds, lds, rds, eds, sds, ecds), cluster, listener, route, endpoint, secret, or a type URL", t)
		}
	}
	return nil
}
