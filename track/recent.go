package track

import "time"

// RecentPushes is how many of a stream's latest pushes the tracker keeps for
// the live page's timeline: enough to see a storm or a loop, bounded so that
// an idle stream costs a few kilobytes whatever it has been through.
const RecentPushes = 32

// PushRecord is one recent push of a stream, as the timeline shows it.
type PushRecord struct {
	Type      string    `json:"type"` // short name: cds, eds, ...
	TypeURL   string    `json:"type_url"`
	Version   string    `json:"version"`
	Nonce     string    `json:"nonce"`
	SentAt    time.Time `json:"sent_at"`
	Resources int       `json:"resources"`
	Bytes     int       `json:"bytes"`
	Added     int       `json:"added"`
	Removed   int       `json:"removed"`
	Changed   int       `json:"changed"`
	FullSync  bool      `json:"full_sync,omitempty"`
	Redundant bool      `json:"redundant,omitempty"`
	// Result is empty while the push waits for its answer, then ack, nack,
	// superseded, timeout or closed.
	Result PushResult `json:"result"`
	// LatencySeconds is from the push to its outcome; null while it waits.
	LatencySeconds *float64 `json:"latency_seconds"`
	Error          string   `json:"error,omitempty"` // the NACK's message
}

// pushRing holds a stream's latest pushes, oldest overwritten first. Each
// push is numbered; a type remembers the number of its latest push so that
// its outcome lands on the right record, unless that has been overwritten.
type pushRing struct {
	recs [RecentPushes]pushRecord
	n    uint64 // pushes recorded since the stream opened
}

// pushRecord is a PushRecord in the tracker's form: the strings are those of
// the push event, shared, so a record costs no allocation.
type pushRecord struct {
	typeURL string
	short   string
	version string
	nonce   string
	sentAt  time.Time
	res     int
	bytes   int
	diff    [3]int
	full    bool
	redund  bool
	result  PushResult
	latency time.Duration
	err     string
}

// add records a push and returns its number.
func (r *pushRing) add(p *Push) uint64 {
	r.n++
	r.recs[r.n%RecentPushes] = pushRecord{
		typeURL: p.TypeURL, short: p.Type, version: p.Version, nonce: p.Nonce, sentAt: p.SentAt,
		res: p.Resources, bytes: p.Bytes, diff: [3]int{p.Diff.Added, p.Diff.Removed, p.Diff.Changed},
		full: p.FullSync, redund: p.Redundant,
	}
	return r.n
}

// end records the outcome of push number seq, if it is still in the ring.
func (r *pushRing) end(seq uint64, result PushResult, latency time.Duration, err string) {
	if r == nil || seq == 0 || seq > r.n || r.n-seq >= RecentPushes {
		return
	}
	rec := &r.recs[seq%RecentPushes]
	rec.result, rec.latency, rec.err = result, latency, err
}

// records returns the recorded pushes, oldest first.
func (r *pushRing) records() []PushRecord {
	if r == nil {
		return []PushRecord{}
	}
	first := uint64(1)
	if r.n > RecentPushes {
		first = r.n - RecentPushes + 1
	}
	out := make([]PushRecord, 0, r.n-first+1)
	for seq := first; seq <= r.n; seq++ {
		rec := &r.recs[seq%RecentPushes]
		pr := PushRecord{
			Type: rec.short, TypeURL: rec.typeURL, Version: rec.version, Nonce: rec.nonce, SentAt: rec.sentAt,
			Resources: rec.res, Bytes: rec.bytes, Added: rec.diff[0], Removed: rec.diff[1], Changed: rec.diff[2],
			FullSync: rec.full, Redundant: rec.redund, Result: rec.result, Error: rec.err,
		}
		if rec.result != "" {
			secs := rec.latency.Seconds()
			pr.LatencySeconds = &secs
		}
		out = append(out, pr)
	}
	return out
}

// RecentPushes returns the latest pushes of a stream (at most RecentPushes),
// oldest first, and whether the stream is tracked.
func (t *Tracker) RecentPushes(streamID uint64) ([]PushRecord, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.streams[streamID]
	if s == nil {
		return nil, false
	}
	return s.recent.records(), true
}
