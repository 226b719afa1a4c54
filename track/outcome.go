package track

import "time"

// outcome is what came of one type's pushes on a stream: the latest ACK and
// NACK, the counts the pages show, and where each push is recorded for the
// timeline. The latest push's own version and nonce are its sentPush's.
type outcome struct {
	ackedVersion, ackedNonce string
	lastError                string
	// ackedAt and nackedAt are when the latest ACK and NACK arrived, for
	// the ages the pages show (the latest push's is sentPush.at).
	ackedAt, nackedAt time.Time
	// recent is the stream's ring of latest pushes (nil before the type's
	// first push), and seq the number of the latest push in it.
	recent *pushRing
	seq    uint64

	// Counts of a type on one stream: four billion are decades of pushes,
	// and 32 bits keep an idle type's state in a smaller size class.
	pushes, acks, nacks, staleNonces, redundant, fullSyncs uint32

	nacked bool // the latest answered push was rejected
	// unsure is set when frames of the stream went unobserved, until the
	// next push of the type is observed: a nonce the tap does not know may
	// then be that of a push it did not see.
	unsure     bool
	fullSynced bool // the type has had its initial full sync on this stream
}

// record puts ev, the type's new push, in r, its stream's ring.
func (o *outcome) record(r *pushRing, ev *Push) {
	o.recent = r
	o.seq = r.add(ev)
}

// sent counts ev, the type's new push, once its diff is known.
func (o *outcome) sent(ev *Push) {
	o.pushes++
	if ev.FullSync {
		o.fullSynced = true
		o.fullSyncs++
	}
	if ev.Redundant {
		o.redundant++
	}
}

// end records the outcome of the latest push in the ring.
func (o *outcome) end(result PushResult, latency time.Duration, err string) {
	o.recent.end(o.seq, result, latency, err)
}

// acked counts an ACK of ev, the latest push, at at.
func (o *outcome) acked(ev *Push, at time.Time) {
	o.ackedAt = at
	o.acks++
	o.ackedVersion, o.ackedNonce = ev.Version, ev.Nonce
	o.nacked = false
	o.lastError = ""
}

// nackedWith counts a NACK of the latest push, with message, at at.
func (o *outcome) nackedWith(message string, at time.Time) {
	o.nackedAt = at
	o.nacks++
	o.nacked = true
	o.lastError = message
}

// state follows istioctl proxy-status, with the rejection taken from the
// latest answered push, sent being the latest push.
func (o *outcome) state(sent *sentPush) State {
	switch {
	case o.pushes == 0:
		return StateNotSent
	case o.nacked:
		return StateNACKed
	case o.ackedNonce == sent.nonce:
		return StateSynced
	}
	return StateStale
}
