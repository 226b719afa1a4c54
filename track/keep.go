package track

import (
	"bytes"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/adstap/adstap/codec"
)

// kept is what a type's latest push left for its NACK: the push's bytes held
// by reference, or a compact copy of its changed resources.
type kept struct {
	data mem.BufferSlice // share's
	// share holds the bytes, with every stream that kept the same (share.go).
	share *sharedPush
	// size is what the stream holds of its own (the views), beside share.
	size int64
	// owner: the stream's push made share (its Accepted counts it).
	owner bool
	// skipped: the push was not kept because of the bound.
	skipped bool
	// compact: data holds only the resources the push added or changed.
	compact bool
	// unchangedBits marks, in a push held by reference, the resources it
	// carried unchanged (bit i for resource i); nil when there are none.
	unchangedBits []uint64
	unchanged     int // resources carried unchanged, heartbeats aside
	// views are the push's resources as decoded, into data (and into the
	// decoder's copies of the resources that straddled its buffers), and
	// removed its Delta removals, for an ACK's Accepted; nil unless a
	// taker takes the type's accepted pushes (lease.go).
	views   []AcceptedResource
	removed []string
	// partial: views are only the resources the push added or changed,
	// removed what it dropped of the acknowledged state (Accepted.Partial).
	partial bool
}

// keeper holds what a NACK of each type's latest push needs to name the
// resources it rejected and the Istio objects they came from, until the
// client answers. The tracker keeps only hashes of what it was sent; without
// these bytes the rejected push would be gone when its NACK arrives. An ACK,
// a newer push or the stream's end lets go of them; a NACK hands them to a
// Rejected, which lets go once read. It is the tap's one place for a push
// awaiting its answer: what an output needs of a push once answered it is
// handed from here (Changed for tracing, Accepted, leased, for the retained
// configuration), never kept by the output from the push's own bytes.
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
//
// Either way the bytes are kept once for every stream that was sent the
// same: a push whose kept resources (their hashes and names, in order) are
// what another stream's push keeps shares that push's bytes (share.go),
// and lets its own go at once, so the bound counts distinct bytes and a
// fan-out of one push to a thousand proxies holds one push and a thousand
// small views.
type keeper struct {
	limit int64 // <0: keep nothing
	held  atomic.Int64
	// handsOver: a push that ends otherwise than by a NACK or a timeout
	// hands what it kept to its PushEnded (Changed) rather than letting go
	// of it (Tracker.TakeChanged).
	handsOver bool
	// takers are the outputs that take accepted pushes (lease.go), each
	// leased what it takes; registered before any stream.
	takers []Takes
	// skipped counts pushes not kept because the bound was reached.
	skipped atomic.Uint64
	// store holds the bytes kept, each once for every stream that kept
	// the same (share.go).
	store shareStore
}

// Takes says which accepted pushes a taker takes.
type Takes struct {
	// Types selects the types taken by their type URL; nil takes every
	// type.
	Types func(typeURL string) bool
	// Superseded also takes a push superseded before its answer, which the
	// tracker assumes the client applied (the reference check follows
	// what a client applies, not only what it acknowledged).
	Superseded bool
}

// unshare lets go of one holder's reference to p, and of p's bytes with the
// last.
func (k *keeper) unshare(p *sharedPush) {
	sh := p.shard
	sh.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last && sh.m[p.key] == p {
		delete(sh.m, p.key)
	}
	sh.mu.Unlock()
	if last {
		p.data.Free()
		k.held.Add(-p.size)
	}
}

// compactShare: a push is kept compact (only its changed resources, copied)
// when they take at most 1/compactShare of its bytes.
const compactShare = 4

// compactBodies are the bodies of the resources at indexes changed in b,
// resp's compact form, in that order.
func compactBodies(b []byte, resp *codec.Response, changed []int32) [][]byte {
	bodies := make([][]byte, len(changed))
	end := compactEnvelopeSize(resp)
	for j, i := range changed {
		r := &resp.Resources[i]
		end += compactResourceSize(r, resp.Delta)
		bodyEnd := end
		if len(r.Name) > 0 && (resp.Delta || !plainAny(r)) {
			bodyEnd -= fieldSize(3, len(r.Name)) // the wrapper's name follows its Any
		}
		bodies[j] = b[bodyEnd-len(r.Body) : bodyEnd : bodyEnd]
	}
	return bodies
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

// compactPool holds the buffers of compact copies between pushes. A push
// keeps its copy until its answer, a few milliseconds, and the next push of
// the type takes it again: a fresh allocation of hundreds of kilobytes for
// every push costs more in page faults and zeroing than the copy itself.
var compactPool = mem.NewTieredBufferPool(4<<10, 16<<10, 64<<10, 256<<10, 1<<20, 4<<20, 16<<20, 64<<20)

// compactCopy appends to b the compact form of resp with its resources at
// indexes changed: compactEnvelopeSize and compactResourceSize bytes, which
// b has room for.
func compactCopy(b []byte, resp *codec.Response, changed []int32) []byte {
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
// (PushEnded.Changed, with Tracker.TakeChanged): the bytes of the
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

// keptBytes are the bytes of a push a keeper let go of to a Rejected, a
// Changed or an Accepted, read at most once.
type keptBytes struct {
	once          sync.Once
	data          mem.BufferSlice // share's
	share         *sharedPush
	size          int64   // what the holder counts against the keeper's bound beside share
	keeper        *keeper // nil when data is nil
	unchangedBits []uint64
	read          any
	// owners counts the holders of data when an ACK handed it to more than
	// one (a Changed, and each lease of the Accepted); nil when there is
	// one.
	owners *atomic.Int32
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
	data := b.data
	if data == nil {
		return
	}
	b.data = nil
	b.release(data)
}

// release lets go of one holder's share of data, and of data with the last.
func (b *keptBytes) release(data mem.BufferSlice) {
	if b.owners != nil && b.owners.Add(-1) > 0 {
		return // another holder lets go
	}
	b.keeper.unshare(b.share)
	b.keeper.held.Add(-b.size)
}
