package main

import (
	"errors"
	"flag"
	"strconv"

	"github.com/adstap/adstap/track"
)

// addDetectorFlags adds the tracker's thresholds to c, with its defaults.
func addDetectorFlags(c *command, cfg *track.Config) {
	*cfg = track.DefaultConfig()
	c.group("Detectors (what the live log and /debug/streams call a problem)")
	c.Var(durationValue{&cfg.PushTimeout}, "push-timeout", "a push unanswered for this `duration` is reported as timed out (state STALE)")
	c.Var(intValue{&cfg.NACKStormThreshold}, "nack-storm-threshold", "a NACK storm is this many NACKs (`count`) of one stream and type within --nack-storm-window")
	c.Var(durationValue{&cfg.NACKStormWindow}, "nack-storm-window", "the `duration` over which NACKs are counted for a storm")
	c.Var(intValue{&cfg.NACKLoopThreshold}, "nack-loop-threshold", "a NACK loop is the same rejected content pushed and NACKed this many times (`count`) in a row")
	c.Var(intValue{&cfg.RepeatedFullSyncLimit}, "full-sync-limit", "alarm when a node gets more than this many repeated full syncs (`count`; not counting a reconnect's initial sync) within --full-sync-window")
	c.Var(durationValue{&cfg.RepeatedFullSyncWindow}, "full-sync-window", "the `duration` over which repeated full syncs are counted")
	c.Var(intValue{&cfg.HerdThreshold}, "herd-threshold", "a reconnect herd is this many new streams (`count`) across the tap within --herd-window")
	c.Var(durationValue{&cfg.HerdWindow}, "herd-window", "the `duration` over which new streams are counted for a herd")
	c.Var(durationValue{&cfg.FullSyncSettle}, "full-sync-settle", "a stream's full sync is complete once every type it asked for is ACKed and no new type is asked for within this `duration`")
}

// intValue is a count flag: a whole number, 1 or more. Every count adstap
// takes is a size or a threshold, for which 0 means nothing sensible.
type intValue struct{ p *int }

func (v intValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return errNotCount
	}
	*v.p = n
	return nil
}

var errNotCount = errors.New("want a whole number, 1 or more")

var _ flag.Value = intValue{}
