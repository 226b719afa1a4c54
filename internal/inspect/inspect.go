// Package inspect reads capture files (adstap run --capture, docs/capture.md)
// back: it replays every record through a fresh track.Tracker at the
// recorded times and reports what the tap would have said, and more — a
// summary per stream and type, the live log's timeline, the resource-level
// and field-level diff of the pushes of one version, and every NACK. For
// adstap replay it reads what a captured node had been sent as of a point
// (ReadSent) and writes an Envoy bootstrap of that node (Bootstrap);
// serving it to a client is internal/replay's.
//
// Its files are in layers, each using only what the files below it declare
// (test/layers' TestFilesCallDown keeps them so): inspect.go (Run) at the
// top; the reports (summary.go, push.go, nacks.go), sent.go and
// bootstrap.go; files.go (reading captures), filter.go and timeline.go;
// replay.go (the replayer every report reads through); words.go,
// resources.go and types.go at the bottom.
package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/track"
)

// Config says what to read and what to show. Exactly one of the modes
// applies: Push (a version's pushes), NACKs, or else the report (Summary
// and/or Timeline).
type Config struct {
	// Files are read in order, oldest first. A single path whose rotated
	// siblings (PATH.1, PATH.2, ...) exist stands for the whole set.
	Files []string

	// The report: the timeline (the live log of the replay) and the
	// summary per stream and type. Follow keeps reading the last file as
	// it grows, printing the timeline as it comes, until ctx ends.
	Summary, Timeline bool
	Follow            bool
	// Poll is how often a followed file is checked for growth and
	// rotation; zero means every 200ms.
	Poll time.Duration
	// polled is told of every poll that found nothing new (tests).
	polled func()

	// Push, when set, shows every push of this version: per stream and
	// type the names added, removed and changed; with Resources also each
	// resource as JSON and the field-level diff of each changed one
	// against the last version of it the client accepted.
	Push      string
	Resources bool

	// NACKs shows every NACK, identical ones (same stream, type and
	// message) collapsed into one entry with a count.
	NACKs bool

	// Detect holds the detectors' thresholds, which should be those the
	// tap ran with; zero fields take track's defaults. MaxNames is ignored:
	// inspect keeps every name.
	Detect track.Config

	// Filter narrows every mode to a node, a type, a stream or a time span.
	Filter Filter

	// JSONL writes every record instead, as a JSON line, its message in
	// base64 inside it — a format-1 line, whatever the file's format — for
	// jq, grep and the like. Only Follow goes with it.
	JSONL bool

	Stdout, Stderr io.Writer
}

// Run reads the files and writes what cfg asks for to cfg.Stdout; warnings
// (a file cut short) go to cfg.Stderr. An interrupted replay (ctx done)
// still prints what it has and returns nil.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.Poll <= 0 {
		cfg.Poll = defaultPoll
	}
	files, err := openFiles(cfg.Files)
	if err != nil {
		return err
	}
	defer closeAll(files)
	if cfg.Follow && (cfg.Push != "" || cfg.NACKs) {
		return errors.New("--follow shows the timeline; it does not combine with --push or --nacks")
	}

	var (
		sum   *summarizer
		push  *pushes
		nacks *nackCollector
		out   []consumer
	)
	add := func(c consumer, counts bool) {
		if !cfg.Filter.empty() {
			c = newFiltered(c, cfg.Filter, counts)
		}
		out = append(out, c)
	}
	switch {
	case cfg.Push != "":
		push = newPushes(cfg.Push, cfg.Resources)
		add(push, true)
	case cfg.NACKs:
		nacks = newNACKCollector()
		add(nacks, true)
	default:
		if cfg.Timeline {
			add(newTimeline(cfg.Stdout), false)
		}
		if cfg.Summary {
			sum = newSummarizer()
			add(sum, true)
		}
	}
	rp := newReplayer(cfg.Detect, out...)
	rd := &reader{rp: rp, stderr: cfg.Stderr, poll: cfg.Poll, polled: cfg.polled}
	if cfg.JSONL {
		if cfg.Push != "" || cfg.NACKs || !cfg.Filter.empty() {
			return errors.New("--jsonl writes every record; it combines with --follow only (filter with jq)")
		}
		enc := json.NewEncoder(cfg.Stdout)
		rd.raw = func(rec *capture.Record) error { return enc.Encode(rec) }
		rd.rp, sum = newReplayer(cfg.Detect), nil
	}

	last := len(files)
	if cfg.Follow {
		last--
	}
	for _, src := range files[:last] {
		if err := rd.readFile(ctx, src); err != nil {
			return err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if cfg.Follow && ctx.Err() == nil {
		if err := rd.follow(ctx, files[last], cfg.Files[len(cfg.Files)-1]); err != nil {
			return err
		}
	}

	switch {
	case push != nil:
		push.print(cfg.Stdout, rd.files)
	case nacks != nil:
		nacks.print(cfg.Stdout, rd.files)
	case sum != nil:
		if cfg.Timeline {
			fmt.Fprintln(cfg.Stdout)
		}
		printSummary(cfg.Stdout, sum.result(rd.files))
	}
	return nil
}

// summarize reads the files through a fresh tracker and returns the summary,
// the way Run computes it, for callers (and tests) that want the numbers
// rather than the text.
func summarize(ctx context.Context, files []string, detect track.Config, stderr io.Writer) (*summary, error) {
	sum := newSummarizer()
	read, err := readAll(ctx, files, detect, sum, stderr, "inspect")
	if err != nil {
		return nil, err
	}
	return sum.result(read), nil
}
