package track

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
)

// DefaultKeepBytes bounds the bytes of unanswered pushes the tracker keeps
// for their NACKs (Config.KeepBytes).
const DefaultKeepBytes = 64 << 20

// keeper holds, by reference, the bytes of each type's latest push until the
// client answers it, so that a NACK can name the resources it rejected and
// the Istio objects they came from. The tracker keeps only hashes of what it
// was sent; without these bytes the rejected push would be gone when its
// NACK arrives. An ACK, a newer push or the stream's end lets go of them;
// a NACK hands them to a Rejected, which lets go once read.
type keeper struct {
	limit int64 // <0: keep nothing
	held  atomic.Int64
	// skipped counts pushes not kept because the bound was reached.
	skipped atomic.Uint64
}

// KeptStats is what the keeper holds and has had to give up.
type KeptStats struct {
	Bytes   int64  // held now, awaiting an answer or an output's reading (Rejected)
	Skipped uint64 // pushes not kept because Config.KeepBytes was reached
}

// Kept returns the keeper's figures, for metrics.
func (t *Tracker) Kept() KeptStats {
	return KeptStats{Bytes: t.keep.held.Load(), Skipped: t.keep.skipped.Load()}
}

// kept is one push's bytes, held by reference.
type kept struct {
	data mem.BufferSlice
	size int64
	// skipped: the push was not kept because of the bound.
	skipped bool
}

// hold keeps data (Ref'd) as the type's latest push, letting go of the
// previous one. A nil data (the caller has no bytes to give) keeps nothing.
func (k *keeper) hold(slot *kept, data mem.BufferSlice) {
	k.drop(slot)
	if data == nil || k.limit < 0 {
		return
	}
	size := int64(data.Len())
	if k.held.Add(size) > k.limit {
		k.held.Add(-size)
		k.skipped.Add(1)
		slot.skipped = true
		return
	}
	data.Ref()
	*slot = kept{data: data, size: size}
}

// drop lets go of what slot holds.
func (k *keeper) drop(slot *kept) {
	if slot.data != nil {
		slot.data.Free()
		k.held.Add(-slot.size)
	}
	*slot = kept{}
}

// reject hands what slot holds to the Rejected of a NACK naming names.
func (k *keeper) reject(slot *kept, delta bool, message string, names []string) *Rejected {
	defer func() { *slot = kept{} }()
	r := &Rejected{Delta: delta, Message: message, Names: names}
	switch {
	case slot.data != nil:
		size := slot.size
		r.data, r.release = slot.data, func() { k.held.Add(-size) }
	case slot.skipped:
		r.NotKept = "adstap's bound on unanswered pushes (--nack-keep-bytes) was reached when it was sent"
	case k.limit < 0:
		r.NotKept = "keeping pushes is off (--nack-keep-bytes 0)"
	default:
		r.NotKept = "its bytes were not given to the tracker"
	}
	return r
}

// Rejected is what a NACK rejected, as the tracker knows it: the bytes of
// the push it answers, kept by reference until then, and the pushed names
// its message mentions. What the resources hold is for the outputs to read
// (origin.Of), once, whichever asks first: the tracker never unmarshals a
// resource.
type Rejected struct {
	Delta   bool   // the push is a DeltaDiscoveryResponse
	Message string // the NACK's error_detail message
	// Names are the pushed resource names the NACK's message mentions;
	// none puts the whole push under suspicion.
	Names []string
	// NotKept says why the push's bytes are not at hand; empty when they are.
	NotKept string

	once    sync.Once
	data    mem.BufferSlice
	release func()
	read    any
}

// Read calls read with the rejected push's bytes (nil when NotKept) the
// first time it is called, then lets go of the bytes; every call returns
// what that first read returned. It returns nil when the tracker let go of
// the bytes before anyone asked: an ACK, a NACK of other content or the end
// of the stream came first.
func (r *Rejected) Read(read func(data mem.BufferSlice) any) any {
	r.once.Do(func() {
		r.read = read(r.data)
		r.free()
	})
	return r.read
}

// discard lets go of the bytes if no one has read them: the tracker calls it
// when it forgets the Rejected, so that a NACK no output asked about (a
// throttled log line, tracing off) does not hold its push for ever.
func (r *Rejected) discard() {
	if r != nil {
		r.once.Do(r.free)
	}
}

func (r *Rejected) free() {
	if r.data != nil {
		r.data.Free()
		r.data = nil
		r.release()
	}
}
