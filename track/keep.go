package track

import (
	"bytes"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/adstap/adstap/codec"
)

// DefaultKeepBytes bounds the bytes of unanswered pushes the tracker keeps
// for their NACKs (Config.KeepBytes).
const DefaultKeepBytes = 64 << 20

// keeper holds what a NACK of each type's latest push needs to name the
// resources it rejected and the Istio objects they came from, until the
// client answers. The tracker keeps only hashes of what it was sent; without
// these bytes the rejected push would be gone when its NACK arrives. An ACK,
// a newer push or the stream's end lets go of them; a NACK hands them to a
// Rejected, which lets go once read.
//
// A client never rejects a resource it has already accepted with the same
// bytes (Envoy skips a resource whose hash has not changed; grpc-go's
// validation is deterministic), so what a NACK can reject is what the push
// added or changed since the state the client acknowledged, which the
// tracker diffs every push against. When that is a small part of the push,
// as in most pushes after the first (a config change touches a few
// resources, and istiod resends the rest), those resources are copied,
// re-encoded as a response of their own, and the buffers gRPC received the
// push in are let go at once: a fan-out of one change to a thousand proxies
// would otherwise pin a thousand whole pushes in gRPC's buffers until their
// ACKs, and gRPC would allocate fresh ones for the rest of the storm.
// Otherwise (a first push, a large change, Delta, whose resources are all
// changes as a rule) the push is held by reference (Ref) as it came: a copy
// would cost as much as the buffers it frees.
type keeper struct {
	limit int64 // <0: keep nothing
	held  atomic.Int64
	// handOver: a push that ends otherwise than by a NACK or a timeout
	// hands what it kept to its PushEnded (Changed) rather than letting go
	// of it (Config.HandOverChanged).
	handsOver bool
	// skipped counts pushes not kept because the bound was reached.
	skipped atomic.Uint64
}

// compactShare: a push is kept compact (only its changed resources, copied)
// when they take at most 1/compactShare of its bytes.
const compactShare = 4

// KeptStats is what the keeper holds and has had to give up.
type KeptStats struct {
	Bytes   int64  // held now, awaiting an answer or an output's reading (Rejected)
	Skipped uint64 // pushes not kept because Config.KeepBytes was reached
}

// Kept returns the keeper's figures, for metrics.
func (t *Tracker) Kept() KeptStats {
	return KeptStats{Bytes: t.keep.held.Load(), Skipped: t.keep.skipped.Load()}
}

// kept is what a type's latest push left for its NACK: the push's bytes held
// by reference, or a compact copy of its changed resources.
type kept struct {
	data mem.BufferSlice
	size int64
	// skipped: the push was not kept because of the bound.
	skipped bool
	// compact: data holds only the resources the push added or changed.
	compact bool
	// unchangedBits marks, in a push held by reference, the resources it
	// carried unchanged (bit i for resource i); nil when there are none.
	unchangedBits []uint64
	unchanged     int // resources carried unchanged, heartbeats aside

	// What outlives the push's bytes, for the next push to know whether the
	// acknowledged state can be trusted.
	//
	// pending: the push is still waiting for its answer; an ACK or a NACK
	// clears it (drop, reject).
	pending bool
	// fullSync: the push carried the whole of what the client wants.
	fullSync bool
	// unsure: the acknowledged state includes a push that was superseded
	// before its answer, which the tracker assumes applied. The client may
	// have rejected it, and then a resource of it sent again would look
	// unchanged while the client never accepted it: until an ACK of a
	// full-sync push vouches for the whole state, every resource counts as
	// changed.
	unsure bool
}

// drop lets go of what slot holds. What it knows of the acknowledged state
// stays.
func (k *keeper) drop(slot *kept) {
	if slot.data != nil {
		slot.data.Free()
		k.held.Add(-slot.size)
	}
	*slot = kept{fullSync: slot.fullSync, unsure: slot.unsure}
}

// hold keeps what a NACK of resp, the type's push that send has just diffed
// against the acknowledged state, would need, letting go of what the
// previous push left. data are the bytes resp was decoded from; nil (the
// caller has no bytes to give) keeps nothing.
func (ts *typeState) hold(resp *codec.Response, data mem.BufferSlice) {
	k, slot := ts.keep, &ts.held
	switch {
	case slot.pending:
		// Superseded unanswered: send assumed it applied.
		slot.unsure = true
	case slot.fullSync && !ts.nacked && ts.acks > 0:
		// The previous push carried everything and was acknowledged.
		slot.unsure = false
	}
	k.drop(slot)
	slot.pending, slot.fullSync = true, ts.p.ev.FullSync
	if data == nil || k.limit < 0 {
		return
	}
	trust := !slot.unsure && ts.p.gen == ts.gen
	whole := int64(data.Len())
	// The changed resources' indexes, in scratch space the diff is done
	// with, and a floor on the size of their compact form, which reads no
	// resource's body: a first push of 10 MB is not walked through again.
	changed := ts.sc.fresh[:0]
	least, unchanged := int64(compactEnvelopeSize(resp)), 0
	for i := range resp.Resources {
		r := &resp.Resources[i]
		switch {
		case r.Heartbeat:
			// Nothing to reject: it carries no resource.
		case trust && ts.unchangedAt(resp, i):
			unchanged++
		default:
			changed = append(changed, int32(i))
			least += int64(fieldSize(2, anySize(r)))
		}
	}
	ts.sc.fresh = changed[:0]
	size := whole
	if least*compactShare <= whole {
		exact := int64(compactEnvelopeSize(resp))
		for _, i := range changed {
			exact += int64(compactResourceSize(&resp.Resources[i], resp.Delta))
		}
		if exact*compactShare <= whole {
			size = exact
		}
	}
	if k.held.Add(size) > k.limit {
		k.held.Add(-size)
		k.skipped.Add(1)
		slot.skipped = true
		return
	}
	slot.size, slot.unchanged, slot.compact = size, unchanged, size < whole
	if slot.compact {
		slot.data = mem.BufferSlice{mem.SliceBuffer(compactCopy(resp, changed, int(size)))}
		return
	}
	data.Ref()
	slot.data = data
	if unchanged > 0 {
		// Every bit but the changed resources' (a heartbeat's is never read).
		bits := make([]uint64, (len(resp.Resources)+63)/64)
		for i := range bits {
			bits[i] = ^uint64(0)
		}
		for _, i := range changed {
			bits[i/64] &^= 1 << (i % 64)
		}
		slot.unchangedBits = bits
	}
}

// unchangedAt reports whether resp.Resources[i] is, byte for byte, what the
// client acknowledged under its name. It reads what send's load found: the
// resource's position in the acknowledged state and its hash. A resource
// send did not load at that index (a re-sent push whose diff was reused
// may list its resources in another order) counts as changed.
func (ts *typeState) unchangedAt(resp *codec.Response, i int) bool {
	p, a := &ts.p, &ts.acked
	if i >= len(p.res) {
		return false
	}
	r, h := &p.res[i], resp.Resources[i].Hash
	return !r.heartbeat && r.hash == h && r.pos >= 0 && int(r.pos) < len(a.hashes) && a.hashes[r.pos] == h
}

// reject hands what slot holds to the Rejected of a NACK naming names.
func (k *keeper) reject(slot *kept, delta bool, message string, names []string) *Rejected {
	defer func() { *slot = kept{fullSync: slot.fullSync, unsure: slot.unsure} }()
	r := &Rejected{Delta: delta, Message: message, Names: names}
	switch {
	case slot.data != nil:
		r.keptBytes = keptBytes{data: slot.data, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}
		r.OnlyChanged, r.Unchanged = slot.compact, slot.unchanged
	case slot.skipped:
		r.NotKept = "adstap's bound on unanswered pushes (--nack-keep-bytes) was reached when it was sent"
	case k.limit < 0:
		r.NotKept = "keeping pushes is off (--nack-keep-bytes 0)"
	default:
		r.NotKept = "its bytes were not given to the tracker"
	}
	return r
}

// handOver moves what slot holds to a Changed for the push's PushEnded,
// when the keeper hands over (Config.HandOverChanged) and holds bytes; nil
// otherwise. What slot says of the push's answer (pending) and of the
// acknowledged state stays for the caller to settle, as after drop.
func (k *keeper) handOver(slot *kept, delta bool) *Changed {
	if !k.handsOver || slot.data == nil {
		return nil
	}
	c := &Changed{Delta: delta, OnlyChanged: slot.compact,
		keptBytes: keptBytes{data: slot.data, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}}
	*slot = kept{pending: slot.pending, fullSync: slot.fullSync, unsure: slot.unsure}
	return c
}

// The compact form of a push is a DiscoveryResponse (or, for a Delta push,
// a DeltaDiscoveryResponse) with the push's type_url, version and nonce and
// its changed resources, so that it decodes (codec.Response.DecodeBuffers)
// into what the push itself would give for them: each resource's name,
// version, type and body, the body's bytes copied as they came. A SotW
// resource is written as a plain Any unless its name or version came from
// a Resource wrapper, which is then written too; a Delta resource is its
// Resource with name, version and resource. What else a wrapper carried
// (ttl, cache_control, metadata, aliases) and the Delta removals are left
// out: a NACK rejects none of them.

// compactCopy writes the compact form of resp with its resources at
// indexes changed, size bytes, in one allocation.
func compactCopy(resp *codec.Response, changed []int32, size int) []byte {
	b := make([]byte, 0, size)
	if resp.VersionInfo != "" {
		b = appendString(b, 1, resp.VersionInfo) // version_info, system_version_info
	}
	b = appendString(b, 4, resp.TypeURL) // type_url
	b = appendString(b, 5, resp.Nonce)   // nonce
	for _, i := range changed {
		b = appendCompactResource(b, &resp.Resources[i], resp.Delta)
	}
	return b
}

func compactEnvelopeSize(resp *codec.Response) int {
	n := fieldSize(4, len(resp.TypeURL)) + fieldSize(5, len(resp.Nonce))
	if resp.VersionInfo != "" {
		n += fieldSize(1, len(resp.VersionInfo))
	}
	return n
}

// compactResourceSize is what appendCompactResource appends for r.
func compactResourceSize(r *codec.Resource, delta bool) int {
	switch {
	case delta:
		return fieldSize(2, wrapperSize(r))
	case plainAny(r):
		return fieldSize(2, anySize(r))
	}
	return fieldSize(2, fieldSize(1, len(codec.TypeResource))+fieldSize(2, wrapperSize(r)))
}

// appendCompactResource appends r as field 2 (resources) of a
// DiscoveryResponse or a DeltaDiscoveryResponse.
func appendCompactResource(b []byte, r *codec.Resource, delta bool) []byte {
	switch {
	case delta:
		b = appendLen(b, 2, wrapperSize(r))
		return appendWrapper(b, r)
	case plainAny(r):
		b = appendLen(b, 2, anySize(r))
		return appendAny(b, r)
	}
	b = appendLen(b, 2, fieldSize(1, len(codec.TypeResource))+fieldSize(2, wrapperSize(r)))
	b = appendString(b, 1, codec.TypeResource)
	b = appendLen(b, 2, wrapperSize(r))
	return appendWrapper(b, r)
}

// plainAny reports whether a SotW resource decodes to what r holds without
// a Resource wrapper: it has no version of its own, and its name, if any,
// is what the decoder reads from its body (field 1, which serializers
// write first).
func plainAny(r *codec.Resource) bool {
	return len(r.Version) == 0 && (len(r.Name) == 0 || bytes.Equal(r.Name, leadingName(r.Body)))
}

// leadingName returns the body's first field if it is a length-delimited
// field 1.
func leadingName(body []byte) []byte {
	num, typ, n := protowire.ConsumeTag(body)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil
	}
	v, m := protowire.ConsumeBytes(body[n:])
	if m < 0 {
		return nil
	}
	return v
}

// anySize is the size of r's Any: type_url (1) and value (2).
func anySize(r *codec.Resource) int {
	return fieldSize(1, len(r.TypeURL)) + fieldSize(2, len(r.Body))
}

func appendAny(b []byte, r *codec.Resource) []byte {
	b = appendBytes(b, 1, r.TypeURL)
	return appendBytes(b, 2, r.Body)
}

// wrapperSize is the size of r as an envoy.service.discovery.v3.Resource:
// version (1), resource (2) and name (3).
func wrapperSize(r *codec.Resource) int {
	n := fieldSize(2, anySize(r))
	if len(r.Version) > 0 {
		n += fieldSize(1, len(r.Version))
	}
	if len(r.Name) > 0 {
		n += fieldSize(3, len(r.Name))
	}
	return n
}

func appendWrapper(b []byte, r *codec.Resource) []byte {
	if len(r.Version) > 0 {
		b = appendBytes(b, 1, r.Version)
	}
	b = appendLen(b, 2, anySize(r))
	b = appendAny(b, r)
	if len(r.Name) > 0 {
		b = appendBytes(b, 3, r.Name)
	}
	return b
}

// fieldSize is the size of a length-delimited field of n bytes.
func fieldSize(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendLen appends the tag and length of a length-delimited field of n
// bytes, which the caller appends next.
func appendLen(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	return append(appendLen(b, num, len(v)), v...)
}

func appendString(b []byte, num protowire.Number, v string) []byte {
	return append(appendLen(b, num, len(v)), v...)
}

// Rejected is what a NACK rejected, as the tracker knows it: the bytes of
// the push it answers (or of its changed resources), kept until then, and
// the pushed names its message mentions. What the resources hold is for the
// outputs to read (origin.Of), once, whichever asks first: the tracker
// never unmarshals a resource.
type Rejected struct {
	Delta   bool   // the push is a DeltaDiscoveryResponse
	Message string // the NACK's error_detail message
	// Names are the pushed resource names the NACK's message mentions;
	// none puts the whole push under suspicion, but for what it carried
	// unchanged.
	Names []string
	// NotKept says why the push's bytes are not at hand; empty when they are.
	NotKept string
	// OnlyChanged is set when the bytes Read hands over hold only the
	// resources the push added or changed since the state the client
	// acknowledged: a name of Names that is not among them was carried
	// unchanged, which the client had accepted byte for byte before, so it
	// is not what was rejected.
	OnlyChanged bool
	// Unchanged is how many resources the push carried unchanged since that
	// state, out of suspicion (heartbeats aside).
	Unchanged int

	keptBytes
}

// discard lets go of the bytes if no one has read them: the tracker calls it
// when it forgets the Rejected, so that a NACK no output asked about (a
// throttled log line, tracing off) does not hold its push for ever.
func (r *Rejected) discard() {
	if r != nil {
		r.once.Do(r.free)
	}
}

// Changed is what a push kept of its resources, handed to the outputs when
// it ends with an ACK, superseded or with its stream
// (PushEnded.Changed, with Config.HandOverChanged): the bytes of the
// resources it added or changed since the state the client acknowledged,
// for an output to read the Istio objects they record, on its own
// goroutine. The tracker never reads them. They count against
// Config.KeepBytes until Read or Release lets go of them: whoever takes
// them must do one or the other.
type Changed struct {
	Delta bool // the push is a DeltaDiscoveryResponse
	// OnlyChanged is set when the bytes hold only the changed resources;
	// otherwise they are the whole push, and UnchangedAt marks the rest.
	OnlyChanged bool

	keptBytes
}

// Release lets go of the bytes if no one has read them. A nil Changed is
// fine.
func (c *Changed) Release() {
	if c != nil {
		c.once.Do(c.free)
	}
}

// keptBytes are the bytes of a push a keeper let go of to a Rejected or a
// Changed, read at most once.
type keptBytes struct {
	once          sync.Once
	data          mem.BufferSlice
	size          int64   // what data counts against the keeper's bound
	keeper        *keeper // nil when data is nil
	unchangedBits []uint64
	read          any
}

// UnchangedAt reports whether the i-th resource of the bytes Read hands over
// is one the push carried unchanged since the state the client
// acknowledged. It is never set when OnlyChanged (those are not there).
func (b *keptBytes) UnchangedAt(i int) bool {
	return i >= 0 && i/64 < len(b.unchangedBits) && b.unchangedBits[i/64]&(1<<(i%64)) != 0
}

// Read calls read with the push's bytes (nil when a Rejected's are
// NotKept) the first time it is called, then lets go of the bytes; every
// call returns what that first read returned. It returns nil when the bytes
// were let go of before anyone asked: for a Rejected, an ACK, a NACK of
// other content or the end of the stream came first; for a Changed,
// Release.
func (b *keptBytes) Read(read func(data mem.BufferSlice) any) any {
	b.once.Do(func() {
		b.read = read(b.data)
		b.free()
	})
	return b.read
}

func (b *keptBytes) free() {
	if b.data != nil {
		b.data.Free()
		b.data = nil
		b.keeper.held.Add(-b.size)
	}
}
