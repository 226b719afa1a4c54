package track

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// detectorOrder is the order of Detectors' summary rows.
var detectorOrder = []string{DetectorNACKStorm, DetectorNACKLoop, DetectorRepeatedFullSync, DetectorReconnectHerd}

// detectors holds what the tap-wide detectors need, and every episode in
// progress; the stream-scoped state (NACK times, loop run) lives in typeState
// so that it goes away with its stream, and is guarded by the stream's lock.
// mu guards the rest; it is taken only when an episode starts or ends, a
// stream opens, a node is resent everything, or the sweep runs.
type detectors struct {
	mu          sync.Mutex
	cfg         *Config
	active      map[*episode]struct{}
	started     map[string]int
	lastStarted map[string]time.Time
	herd        window
	herdEp      *episode
	syncs       map[syncKey]*syncHistory
}

type syncKey struct{ node string }

// syncHistory is a node's recent full pushes, across its streams.
type syncHistory struct {
	times window
	ep    *episode
}

func newDetectors(cfg *Config) detectors {
	return detectors{
		cfg:         cfg,
		active:      make(map[*episode]struct{}),
		started:     make(map[string]int),
		lastStarted: make(map[string]time.Time),
		herd:        newWindow(cfg.HerdThreshold),
		syncs:       make(map[syncKey]*syncHistory),
	}
}

func (d *detectors) start(ep *episode, detail string, evs []Event) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.startLocked(ep, detail, evs)
}

func (d *detectors) startLocked(ep *episode, detail string, evs []Event) []Event {
	d.active[ep] = struct{}{}
	d.started[ep.detector]++
	d.lastStarted[ep.detector] = ep.since
	return append(evs, DetectorStarted{
		Detector: ep.detector, Key: ep.key, StreamID: ep.streamID, Ref: ep.ref, Node: ep.node, TypeURL: ep.typeURL,
		At: ep.since, Count: ep.count, Detail: detail,
	})
}

// bump counts one more occurrence in an episode in progress, which the
// debug page may be reading.
func (d *detectors) bump(ep *episode) {
	d.mu.Lock()
	ep.count++
	d.mu.Unlock()
}

func (d *detectors) end(ep *episode, at time.Time, evs []Event) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.endLocked(ep, at, evs)
}

func (d *detectors) endLocked(ep *episode, at time.Time, evs []Event) []Event {
	delete(d.active, ep)
	return append(evs, DetectorEnded{
		Detector: ep.detector, Key: ep.key, StreamID: ep.streamID, Ref: ep.ref, Node: ep.node, TypeURL: ep.typeURL,
		At: at, Duration: at.Sub(ep.since), Count: ep.count,
	})
}

func streamEpisode(detector string, s *stream, ts *typeState, at time.Time, count int) *episode {
	return &episode{
		detector: detector, key: fmt.Sprintf("stream %d %s", s.meta.ID, ts.short), streamID: s.meta.ID, ref: s.ref,
		node: s.node.ID, typeURL: ts.url, since: at, count: count,
	}
}

// answered feeds the NACK storm and NACK loop detectors with the answer the
// latest push just got.
func (d *detectors) answered(s *stream, ts *typeState, at time.Time, nack bool, evs []Event) []Event {
	if !nack {
		if ts.loop != nil {
			evs = d.end(ts.loop, at, evs)
			ts.loop = nil
		}
		ts.loopRun = 0
		return d.checkStorm(ts, at, evs)
	}

	if ts.nackTimes.times == nil {
		ts.nackTimes = newWindow(d.cfg.NACKStormThreshold)
	}
	ts.nackTimes.add(at)
	if ts.storm != nil {
		d.bump(ts.storm)
	} else if n := ts.nackTimes.count(at, d.cfg.NACKStormWindow); n >= d.cfg.NACKStormThreshold {
		ts.storm = streamEpisode(DetectorNACKStorm, s, ts, at, n)
		evs = d.start(ts.storm, fmt.Sprintf("%d NACKs of %s on stream %d within %s", n, ts.short, s.meta.ID, d.cfg.NACKStormWindow), evs)
	}

	if ts.loopRun > 0 && ts.loopContent == ts.p.content {
		ts.loopRun++
	} else {
		if ts.loop != nil {
			evs = d.end(ts.loop, at, evs)
			ts.loop = nil
		}
		ts.loopContent, ts.loopRun = ts.p.content, 1
	}
	if ts.loop != nil {
		d.bump(ts.loop)
	} else if ts.loopRun >= d.cfg.NACKLoopThreshold {
		ts.loop = streamEpisode(DetectorNACKLoop, s, ts, at, ts.loopRun)
		evs = d.start(ts.loop, fmt.Sprintf("the same %s content (%d resources) NACKed %d times in a row on stream %d",
			ts.short, len(ts.p.res), ts.loopRun, s.meta.ID), evs)
	}
	return evs
}

// checkStorm ends a storm once the window holds fewer NACKs than the threshold.
func (d *detectors) checkStorm(ts *typeState, now time.Time, evs []Event) []Event {
	if ts.storm != nil && ts.nackTimes.count(now, d.cfg.NACKStormWindow) < d.cfg.NACKStormThreshold {
		evs = d.end(ts.storm, now, evs)
		ts.storm = nil
	}
	return evs
}

// pushed feeds the loop and repeated-full-sync detectors with a new push;
// full is set when it made its push round a new full push (round.go).
func (d *detectors) pushed(s *stream, ts *typeState, at time.Time, full bool, evs []Event) []Event {
	if ts.loopRun > 0 && ts.p.content != ts.loopContent {
		// The control plane sent something else: whatever it was stuck on, it moved on.
		if ts.loop != nil {
			evs = d.end(ts.loop, at, evs)
			ts.loop = nil
		}
		ts.loopRun = 0
	}
	evs = d.checkStorm(ts, at, evs)
	if !full || s.node.ID == "" {
		return evs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Counted per node across its streams: a node that reconnects keeps
	// its history.
	k := syncKey{node: s.node.ID}
	h := d.syncs[k]
	if h == nil {
		h = &syncHistory{times: newWindow(d.cfg.RepeatedFullSyncLimit + 1)}
		d.syncs[k] = h
	}
	h.times.add(at)
	if h.ep != nil {
		h.ep.count++
		return evs
	}
	if n := h.times.count(at, d.cfg.RepeatedFullSyncWindow); n > d.cfg.RepeatedFullSyncLimit {
		h.ep = &episode{
			detector: DetectorRepeatedFullSync, key: "node " + s.node.ID,
			node: s.node.ID, since: at, count: n,
		}
		evs = d.startLocked(h.ep, fmt.Sprintf("%d full pushes (configuration resent unasked, e.g. istiod's push after a config change) to node %s within %s",
			n, s.node.ID, d.cfg.RepeatedFullSyncWindow), evs)
	}
	return evs
}

// opened feeds the reconnect herd detector.
func (d *detectors) opened(at time.Time, evs []Event) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.herd.add(at)
	n := d.herd.count(at, d.cfg.HerdWindow)
	switch {
	case d.herdEp != nil && n < d.cfg.HerdThreshold:
		evs = d.endLocked(d.herdEp, at, evs)
		d.herdEp = nil
	case d.herdEp != nil:
		d.herdEp.count++
	case n >= d.cfg.HerdThreshold:
		d.herdEp = &episode{detector: DetectorReconnectHerd, key: "tap", since: at, count: n}
		evs = d.startLocked(d.herdEp, fmt.Sprintf("%d streams opened within %s", n, d.cfg.HerdWindow), evs)
	}
	return evs
}

// closed ends the episodes of a stream that went away.
func (d *detectors) closed(ts *typeState, at time.Time, evs []Event) []Event {
	if ts.storm != nil {
		evs = d.end(ts.storm, at, evs)
		ts.storm = nil
	}
	if ts.loop != nil {
		evs = d.end(ts.loop, at, evs)
		ts.loop = nil
	}
	return evs
}

// tick ends the tap-wide episodes whose condition no longer holds and
// forgets full-sync history older than its window.
func (d *detectors) tick(now time.Time, evs []Event) []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ended []*episode
	for k, h := range d.syncs {
		n := h.times.count(now, d.cfg.RepeatedFullSyncWindow)
		if h.ep != nil && n <= d.cfg.RepeatedFullSyncLimit {
			ended = append(ended, h.ep)
			h.ep = nil
		}
		if h.ep == nil && n == 0 {
			delete(d.syncs, k)
		}
	}
	slices.SortFunc(ended, func(a, b *episode) int { return strings.Compare(a.key, b.key) })
	for _, ep := range ended {
		evs = d.endLocked(ep, now, evs)
	}
	if d.herdEp != nil && d.herd.count(now, d.cfg.HerdWindow) < d.cfg.HerdThreshold {
		evs = d.endLocked(d.herdEp, now, evs)
		d.herdEp = nil
	}
	return evs
}
