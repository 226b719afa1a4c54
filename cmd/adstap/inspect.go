package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/adstap/adstap/internal/inspect"
	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/track"
)

type inspectFlags struct {
	summaryOnly, timelineOnly bool
	follow                    bool
	push                      string
	resources                 bool
	nacks                     bool
	jsonl                     bool
	detect                    track.Config
	filter                    inspect.Filter
}

func inspectCommand(f *inspectFlags) *command {
	c := newCommand("inspect",
		"adstap inspect reads capture files (adstap run --capture) and replays them through a fresh protocol tracker at the recorded times: the live log the tap wrote (the timeline), a summary per stream and type, the resource- and field-level diff of one version's pushes, or every NACK. Files are read in the order given, oldest first; a single FILE whose rotated siblings FILE.1, FILE.2, ... exist stands for the whole set.",
		"adstap inspect [flags] FILE...")
	c.group("What to show (default: the timeline, then the summary)")
	c.Bool(&f.summaryOnly, "summary-only", false, "only the summary per stream and type: pushes, ACKs, NACKs, ACK latency, full syncs, storms, stale nonces")
	c.Bool(&f.timelineOnly, "timeline-only", false, "only the timeline: the live log of the replay, at the recorded times")
	c.String(&f.push, "push", "", "every push of this `version` (or push id, xds.push_id), by push round, per stream and type: the names added, removed and changed")
	c.Bool(&f.resources, "resources", false, "with --push: each resource as JSON, and the field-level diff of each changed one against the version the client last accepted")
	c.Bool(&f.nacks, "nacks", false, "every NACK: time, stream, node, type, rejected version, the client's message and the resources it names; repeats collapsed with a count")
	c.Bool(&f.jsonl, "jsonl", false, "every record as a JSON line, its message in base64, as is, for jq and grep (with --follow: as the tap writes them)")
	c.group("Which streams and when (every mode)")
	c.String(&f.filter.Node, "node", "", "only the streams of this node `id`")
	c.String(&f.filter.Type, "type", "", "only this `type`: cds, lds, rds, eds, sds, ... (or cluster, listener, route, endpoint, secret, or a type URL)")
	c.Var(uint64Value{&f.filter.Stream}, "stream", "only the stream with this `id`")
	c.Var(timeValue{&f.filter.Since}, "since", "only what happened at or after this `time`: RFC 3339 (2026-11-30T10:20:00Z) or a duration before now (15m)")
	c.Var(timeValue{&f.filter.Until}, "until", "only what happened at or before this `time`: RFC 3339 or a duration before now")
	c.group("Live captures")
	c.Bool(&f.follow, "follow", false, "keep reading the last FILE as the tap writes it (and across its rotation), printing the timeline as it comes, until Ctrl-C; then the summary")
	runconfig.DefineDetectors(c, &f.detect)
	c.epilog = strings.TrimPrefix(inspectExamples, "\n")
	return c
}

const inspectExamples = `
Examples:
  adstap inspect xds.capture                       the timeline and the summary (xds.capture.N included)
  adstap inspect --summary-only xds.capture.2 xds.capture.1 xds.capture
  adstap inspect --push=2026-11-30T10:20:50Z/42 --resources xds.capture
  adstap inspect --nacks xds.capture
  adstap inspect --follow xds.capture              while adstap run --capture=xds.capture runs
  adstap inspect --jsonl xds.capture | jq -c 'select(.kind=="close")'

A file cut short (the tap killed mid-write) is read up to its last complete
record, with a warning, and inspect exits 0. Exit status 2: bad flags, or a
file that is missing or is not a capture. The format: docs/capture.md.
`

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f inspectFlags
	cmd := inspectCommand(&f)
	flagArgs, files := splitArgs(cmd.fs, args)
	if code, done := cmd.parseArgs(flagArgs, stdout, stderr); done {
		return code
	}
	if err := checkInspectFlags(&f, files); err != nil {
		fmt.Fprintf(stderr, "adstap inspect: %v (see adstap inspect --help)\n", err)
		return exitUsage
	}
	err := inspect.Run(ctx, inspect.Config{
		Files:    files,
		Summary:  !f.timelineOnly,
		Timeline: !f.summaryOnly,
		Follow:   f.follow,
		Push:     f.push, Resources: f.resources,
		NACKs:  f.nacks,
		JSONL:  f.jsonl,
		Detect: f.detect,
		Filter: f.filter,
		Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		fmt.Fprintf(stderr, "adstap inspect: %v\n", err)
		if errors.As(err, new(*inspect.InputError)) {
			return exitUsage
		}
		return exitFailure
	}
	return exitOK
}

func checkInspectFlags(f *inspectFlags, files []string) error {
	switch {
	case len(files) == 0:
		return errors.New("name at least one capture FILE")
	case f.summaryOnly && f.timelineOnly:
		return errors.New("--summary-only and --timeline-only exclude each other")
	case f.push != "" && f.nacks:
		return errors.New("--push and --nacks exclude each other")
	case f.resources && f.push == "":
		return errors.New("--resources goes with --push=VERSION")
	case f.jsonl && (f.push != "" || f.nacks || f.summaryOnly || f.timelineOnly || f.filter != inspect.Filter{}):
		return errors.New("--jsonl writes every record as it is; it combines with --follow only (filter with jq)")
	case f.follow && (f.push != "" || f.nacks || f.summaryOnly):
		return errors.New("--follow prints the timeline as it comes; it does not combine with --push, --nacks or --summary-only")
	case !f.filter.Since.IsZero() && !f.filter.Until.IsZero() && f.filter.Until.Before(f.filter.Since):
		return errors.New("--until is before --since")
	}
	if t := f.filter.Type; t != "" {
		short, ok := configTypes[strings.ToLower(t)]
		switch {
		case ok:
			f.filter.Type = short
		case !strings.Contains(t, "/"):
			return fmt.Errorf("--type %q: want a short name (cds, lds, rds, eds, sds, ecds), cluster, listener, route, endpoint, secret, or a type URL", t)
		}
	}
	return nil
}

// timeValue is a flag holding a point in time: RFC 3339, or a duration
// before now.
type timeValue struct{ p *time.Time }

func (v timeValue) String() string {
	if v.p == nil || v.p.IsZero() {
		return ""
	}
	return v.p.Format(time.RFC3339Nano)
}

func (v timeValue) Set(s string) error {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		*v.p = t
		return nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		*v.p = time.Now().Add(-d)
		return nil
	}
	return fmt.Errorf("want RFC 3339 (2026-11-30T10:20:00Z) or a duration before now (15m)")
}

// splitArgs separates flags from file names, which may come in any order
// (adstap inspect FILE --nacks): an argument that starts with a dash is a
// flag, and takes the next argument as its value unless it is a boolean or
// carries =value; everything after "--" is a file.
func splitArgs(fs *flag.FlagSet, args []string) (flags, files []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(files, args[i+1:]...)
		case len(a) < 2 || a[0] != '-':
			files = append(files, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		fl := fs.Lookup(name)
		if fl == nil {
			continue // parse reports it
		}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return flags, files
}
