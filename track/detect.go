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
// progress; the stream-scoped state (NACK times, loop run) lives in each
// type's nackWatch so that it goes away with its stream, and is guarded
// by the stream's lock.
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

// nackWatch is what the NACK storm and NACK loop detectors follow of one
// type of a stream: nothing (nil) until the type's first NACK, since most
// types never see one.
type nackWatch struct{ e *nackEpisodes }

// nackEpisodes is what a nackWatch follows once its type has had a NACK.
type nackEpisodes struct {
	// NACK storm: the last NACK times, enough to tell a storm from a burst.
	nackTimes window
	storm     *episode
	// NACK loop: the content of the NACKed push and how many times in a row
	// it was NACKed.
	loopContent uint64
	loopRun     int
	loop        *episode
	// times holds nackTimes' times up to the default threshold, so that
	// the first NACK allocates once.
	times [inlineNACKTimes]time.Time
}

// inlineNACKTimes is DefaultConfig's NACKStormThreshold.
const inlineNACKTimes = 5

// newNACKEpisodes returns what a type's first NACK starts to follow, for a
// storm of threshold NACKs.
func newNACKEpisodes(threshold int) *nackEpisodes {
	e := new(nackEpisodes)
	if threshold <= len(e.times) {
		e.nackTimes = window{times: e.times[:threshold]}
	} else {
		e.nackTimes = newWindow(threshold)
	}
	return e
}

// streamEpisode starts an episode of the type of p, its latest push, on
// the stream of node.
func streamEpisode(detector string, p *push, node string, at time.Time, count int) *episode {
	return &episode{
		detector: detector, key: fmt.Sprintf("stream %d %s", p.ev.StreamID, p.ev.Type), streamID: p.ev.StreamID, ref: p.ev.Ref,
		node: node, typeURL: p.ev.TypeURL, since: at, count: count,
	}
}

// answered feeds the NACK storm and NACK loop detectors of a type with the
// answer p, its latest push, just got on the stream of node.
func (d *detectors) answered(w *nackWatch, p *push, node string, at time.Time, nack bool, evs []Event) []Event {
	e := w.e
	if !nack {
		if e == nil {
			return evs
		}
		if e.loop != nil {
			evs = d.end(e.loop, at, evs)
			e.loop = nil
		}
		e.loopRun = 0
		return d.checkStorm(w, at, evs)
	}

	if e == nil {
		e = newNACKEpisodes(d.cfg.NACKStormThreshold)
		w.e = e
	}
	e.nackTimes.add(at)
	if e.storm != nil {
		d.bump(e.storm)
	} else if n := e.nackTimes.count(at, d.cfg.NACKStormWindow); n >= d.cfg.NACKStormThreshold {
		e.storm = streamEpisode(DetectorNACKStorm, p, node, at, n)
		evs = d.start(e.storm, fmt.Sprintf("%d NACKs of %s on stream %d within %s", n, p.ev.Type, p.ev.StreamID, d.cfg.NACKStormWindow), evs)
	}

	if e.loopRun > 0 && e.loopContent == p.content {
		e.loopRun++
	} else {
		if e.loop != nil {
			evs = d.end(e.loop, at, evs)
			e.loop = nil
		}
		e.loopContent, e.loopRun = p.content, 1
	}
	if e.loop != nil {
		d.bump(e.loop)
	} else if e.loopRun >= d.cfg.NACKLoopThreshold {
		e.loop = streamEpisode(DetectorNACKLoop, p, node, at, e.loopRun)
		evs = d.start(e.loop, fmt.Sprintf("the same %s content (%d resources) NACKed %d times in a row on stream %d",
			p.ev.Type, len(p.res), e.loopRun, p.ev.StreamID), evs)
	}
	return evs
}

// checkStorm ends a storm once the window holds fewer NACKs than the threshold.
func (d *detectors) checkStorm(w *nackWatch, now time.Time, evs []Event) []Event {
	if e := w.e; e != nil && e.storm != nil && e.nackTimes.count(now, d.cfg.NACKStormWindow) < d.cfg.NACKStormThreshold {
		evs = d.end(e.storm, now, evs)
		e.storm = nil
	}
	return evs
}

// pushed feeds the loop and repeated-full-sync detectors with p, a type's
// new push on the stream of node; full is set when it made its push round
// a new full push (round.go).
func (d *detectors) pushed(w *nackWatch, p *push, node string, at time.Time, full bool, evs []Event) []Event {
	if e := w.e; e != nil && e.loopRun > 0 && p.content != e.loopContent {
		// The control plane sent something else: whatever it was stuck on, it moved on.
		if e.loop != nil {
			evs = d.end(e.loop, at, evs)
			e.loop = nil
		}
		e.loopRun = 0
	}
	evs = d.checkStorm(w, at, evs)
	if !full || node == "" {
		return evs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Counted per node across its streams: a node that reconnects keeps
	// its history.
	k := syncKey{node: node}
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
			detector: DetectorRepeatedFullSync, key: "node " + node,
			node: node, since: at, count: n,
		}
		evs = d.startLocked(h.ep, fmt.Sprintf("%d full pushes (configuration resent unasked, e.g. istiod's push after a config change) to node %s within %s",
			n, node, d.cfg.RepeatedFullSyncWindow), evs)
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

// closed ends the episodes of a type of a stream that went away.
func (d *detectors) closed(w *nackWatch, at time.Time, evs []Event) []Event {
	e := w.e
	if e == nil {
		return evs
	}
	if e.storm != nil {
		evs = d.end(e.storm, at, evs)
		e.storm = nil
	}
	if e.loop != nil {
		evs = d.end(e.loop, at, evs)
		e.loop = nil
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
