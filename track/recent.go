package track

import "time"

// RecentPushes is how many of a stream's latest pushes the tracker keeps for
// the live page's timeline: enough to see a storm or a loop, bounded so that
// an idle stream costs a few kilobytes whatever it has been through.
const RecentPushes = 32

// PushRecord is one recent push of a stream, as the timeline shows it.
type PushRecord struct {
	Type      string    `json:"type"` // short name: cds, eds, ...
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
// Push number seq is at recs[(seq-1)%RecentPushes]. recs grows with the
// pushes up to RecentPushes records, so that a stream idle after its
// initial sync, a mesh's usual stream, holds the few records it has.
type pushRing struct {
	recs []pushRecord
	n    uint64 // pushes recorded since the stream opened
}

func (r *pushRing) at(seq uint64) *pushRecord { return &r.recs[(seq-1)%RecentPushes] }

// pushRecord is a PushRecord in the tracker's form, kept small since every
// stream holds RecentPushes of them: the strings are those of the push event,
// shared, so a record costs no allocation; times are Unix nanoseconds.
type pushRecord struct {
	short, version, nonce, err string
	sentAt, latency            int64
	res, bytes                 int32
	diff                       [3]int32
	full, redund               bool
	result                     uint8 // an index into results
}

// results are the outcomes a record can hold; 0 is "no answer yet".
var results = [...]PushResult{"", ResultACK, ResultNACK, ResultSuperseded, ResultClosed, ResultTimeout}

func resultIndex(r PushResult) uint8 {
	for i, v := range results {
		if v == r {
			return uint8(i)
		}
	}
	return 0
}

func clamp32(n int) int32 { return int32(min(n, 1<<31-1)) }

// add records a push and returns its number.
func (r *pushRing) add(p *Push) uint64 {
	r.n++
	if len(r.recs) < RecentPushes {
		if len(r.recs) == cap(r.recs) {
			// Doubled, up to RecentPushes exactly: append would round up.
			recs := make([]pushRecord, len(r.recs), min(max(2*cap(r.recs), 2), RecentPushes))
			copy(recs, r.recs)
			r.recs = recs
		}
		r.recs = r.recs[:len(r.recs)+1]
	}
	*r.at(r.n) = pushRecord{
		short: p.Type, version: p.Version, nonce: p.Nonce, sentAt: p.SentAt.UnixNano(),
		res: clamp32(p.Resources), bytes: clamp32(p.Bytes),
		diff: [3]int32{clamp32(p.Diff.Added), clamp32(p.Diff.Removed), clamp32(p.Diff.Changed)},
		full: p.FullSync, redund: p.Redundant,
	}
	return r.n
}

// end records the outcome of push number seq, if it is still in the ring.
func (r *pushRing) end(seq uint64, result PushResult, latency time.Duration, err string) {
	if r == nil || seq == 0 || seq > r.n || r.n-seq >= RecentPushes {
		return
	}
	rec := r.at(seq)
	rec.result, rec.latency, rec.err = resultIndex(result), int64(latency), err
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
		rec := r.at(seq)
		pr := PushRecord{
			Type: rec.short, Version: rec.version, Nonce: rec.nonce, SentAt: time.Unix(0, rec.sentAt).UTC(),
			Resources: int(rec.res), Bytes: int(rec.bytes),
			Added: int(rec.diff[0]), Removed: int(rec.diff[1]), Changed: int(rec.diff[2]),
			FullSync: rec.full, Redundant: rec.redund, Result: results[rec.result], Error: rec.err,
		}
		if rec.result != 0 {
			secs := time.Duration(rec.latency).Seconds()
			pr.LatencySeconds = &secs
		}
		out = append(out, pr)
	}
	return out
}
