package track

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

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

// compactShare: a push is kept compact (only its changed resources, copied)
// when they take at most 1/compactShare of its bytes.
const compactShare = 4

// KeptStats is what the keeper holds and has had to give up.
type KeptStats struct {
	Bytes   int64  // held now, awaiting an answer or an output's reading (Rejected, Changed, Accepted)
	Skipped uint64 // pushes not kept because Config.KeepBytes was reached
}

// Kept returns the keeper's figures, for metrics.
func (t *Tracker) Kept() KeptStats {
	return KeptStats{Bytes: t.keep.held.Load(), Skipped: t.keep.skipped.Load()}
}

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
	if slot.share != nil {
		k.unshare(slot.share)
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
	accepts := ts.acceptTakers != 0
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
	compact := size < whole
	// partial: the push's diff is against the state the client
	// acknowledged as the outputs were handed it, so an Accepted lists
	// only what it added or changed, and what a replacing push dropped;
	// an output applies that to what it has, and a push of 10,000
	// resources that changed 200 costs it 200.
	partial := accepts && trust && !resp.Delta
	nviews := 0
	if accepts {
		nviews = len(resp.Resources)
		if partial {
			nviews = len(changed)
		}
	}
	// What this stream holds of its own: the views. The bytes are shared
	// with every stream whose push kept the same resources (share.go), and
	// so are the views when they are those of the kept resources alone, in
	// order (a partial hand-over of what the push kept: a compact push, or
	// one whose every resource is new), the same for every such stream.
	viewBytes := int64(nviews) * int64(unsafe.Sizeof(AcceptedResource{}))
	sameViews := partial && (compact || len(changed) == len(resp.Resources))
	key, hashes, names := ts.shareKeyOf(resp, changed, compact, size, whole)
	share := k.store.find(key, hashes, names)
	own := viewBytes
	if share != nil && sameViews && share.views != nil {
		own = 0
	}
	need := own
	if share == nil {
		need += size
		if sameViews {
			own = 0 // the share's
		}
		if accepts && !compact {
			// The decoder's copies of what straddled gRPC's buffers,
			// which a push held by reference keeps for the views.
			need += int64(resp.KeepViews())
		}
	}
	if k.held.Add(need) > k.limit {
		k.held.Add(-need)
		if share != nil {
			k.unshare(share)
		}
		k.skipped.Add(1)
		slot.skipped = true
		return
	}
	if share == nil {
		share = &sharedPush{key: key, hashes: hashes, names: names, size: need - own}
		if compact {
			buf := compactPool.Get(int(size))
			b := compactCopy((*buf)[:0], resp, changed)
			*buf = b
			share.data = mem.BufferSlice{mem.NewBuffer(buf, compactPool)}
			if accepts {
				share.bodies = compactBodies(b, resp, changed)
			}
		} else {
			data.Ref()
			share.data = data
			if accepts {
				share.bodies = make([][]byte, len(resp.Resources))
				for i := range resp.Resources {
					b := resp.Resources[i].Body
					share.bodies[i] = b[:len(b):len(b)]
				}
			}
		}
		slot.owner = true
	}
	slot.share, slot.data = share, share.data
	slot.size, slot.unchanged, slot.compact = own, unchanged, compact
	if accepts {
		slot.partial = partial
		switch {
		case own == 0 && share.views != nil:
			// Another stream's push made the views, which read alike.
			slot.views, slot.removed = share.views, ts.droppedNames()
		case partial:
			slot.views, slot.removed = ts.changedViews(resp, changed), ts.droppedNames()
		default:
			slot.views, slot.removed = ts.acceptedViews(resp, changed), slices.Clone(resp.RemovedResources)
		}
		if slot.owner || own != 0 {
			sharedBodies(slot.views, share.bodies, changed, compact, partial)
		}
		if slot.owner && own == 0 {
			share.views = slot.views
		}
	}
	if slot.owner {
		k.store.add(share) // once complete: other streams read it from now
	}
	if !compact && unchanged > 0 {
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

// shareKeyOf is what finds the bytes a push keeps in the store: the
// content hashes and names of the resources kept (changed, when compact;
// else all of them), in order, and a hash of them.
func (ts *typeState) shareKeyOf(resp *codec.Response, changed []int32, compact bool, size, whole int64) (shareKey, []uint64, []string) {
	n := len(resp.Resources)
	if compact {
		n = len(changed)
	}
	hashes, names := make([]uint64, n), make([]string, n)
	sum := mix(uint64(n))
	for j := range n {
		i := j
		if compact {
			i = int(changed[j])
		}
		r := &resp.Resources[i]
		hashes[j], names[j] = r.Hash, ts.nameAt(resp, i)
		sum = mix(sum + r.Hash + uint64(len(names[j])))
	}
	key := shareKey{typeURL: resp.TypeURL, sum: sum, n: n, whole: whole, compact: compact, delta: resp.Delta}
	if compact {
		key.whole = size
	}
	return key, hashes, names
}

// sharedBodies points views at the bodies the shared bytes hold: bodies
// are in the order of changed when compact, else of the push's resources;
// views in the order of changed when partial, else of the push's
// resources, those not in changed without a body when compact (gone with
// the push's bytes).
func sharedBodies(views []AcceptedResource, bodies [][]byte, changed []int32, compact, partial bool) {
	switch {
	case compact && partial:
		for j := range views {
			views[j].Body = bodies[j]
		}
	case compact:
		for i := range views {
			views[i].Body = nil
		}
		for j, i := range changed {
			views[i].Body = bodies[j]
		}
	case partial:
		for j, i := range changed {
			views[j].Body = bodies[i]
		}
	default:
		for i := range views {
			views[i].Body = bodies[i]
		}
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
	if slot.data != nil {
		r.keptBytes = keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}
		r.OnlyChanged, r.Unchanged = slot.compact, slot.unchanged
	} else {
		r.NotKept = k.notKept(slot)
	}
	return r
}

// notKept says why slot holds no bytes of its push.
func (k *keeper) notKept(slot *kept) string {
	switch {
	case slot.skipped:
		return "adstap's bound on unanswered pushes (--nack-keep-bytes) was reached when it was sent"
	case k.limit < 0:
		return "keeping pushes is off (--nack-keep-bytes 0)"
	}
	return "its bytes were not given to the tracker"
}

// handOver moves what slot holds to a Changed for the push's PushEnded,
// when the keeper hands over (Tracker.TakeChanged) and holds bytes; nil
// otherwise. What slot says of the push's answer (pending) and of the
// acknowledged state stays for the caller to settle, as after drop.
func (k *keeper) handOver(slot *kept, delta bool) *Changed {
	if !k.handsOver || slot.data == nil {
		return nil
	}
	c := &Changed{Delta: delta, OnlyChanged: slot.compact,
		keptBytes: keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}}
	*slot = kept{pending: slot.pending, fullSync: slot.fullSync, unsure: slot.unsure}
	return c
}

// accept hands what slot holds over for an ACK of its push, or for a newer
// push superseding it: to an Accepted leased to the takers in takers
// (lease.go), and to a Changed too when changed is set and the keeper hands
// over (Tracker.TakeChanged). Every holder of the bytes, the Changed and
// each lease, counts as an owner, and the last to let go frees them. Either
// is nil when not handed over. What slot says of the acknowledged state
// stays, as after handOver.
func (k *keeper) accept(slot *kept, p *push, changed bool, takers takerSet) (*Changed, *Accepted) {
	if takers == 0 {
		if changed {
			return k.handOver(slot, p.delta), nil
		}
		return nil, nil
	}
	a := &Accepted{Version: p.ev.Version, Replace: p.replace, takers: takers}
	if slot.data == nil {
		a.NotKept = k.notKept(slot)
		return nil, a
	}
	a.Resources, a.Removed, a.Bytes = slot.views, slot.removed, slot.size
	if slot.owner {
		a.Bytes += slot.share.size
	}
	if slot.partial {
		a.Partial, a.Replace = true, false
	}
	a.kept = keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k}
	owners := int32(takers.count())
	var c *Changed
	if changed && k.handsOver {
		c = &Changed{Delta: p.delta, OnlyChanged: slot.compact,
			keptBytes: keptBytes{data: slot.data, share: slot.share, size: slot.size, keeper: k, unchangedBits: slot.unchangedBits}}
		owners++
	}
	if owners > 1 {
		count := new(atomic.Int32)
		count.Store(owners)
		a.kept.owners = count
		if c != nil {
			c.owners = count
		}
	}
	*slot = kept{pending: slot.pending, fullSync: slot.fullSync, unsure: slot.unsure}
	return c, a
}

// acceptedViews are the views of resp's resources for an Accepted, but for
// the bodies of a push kept compact (compactViews), changed being the
// indexes of those it added or changed.
func (ts *typeState) acceptedViews(resp *codec.Response, changed []int32) []AcceptedResource {
	views := make([]AcceptedResource, len(resp.Resources))
	next := 0 // in changed
	for i := range resp.Resources {
		r, v := &resp.Resources[i], &views[i]
		v.Name, v.TypeURL, v.Hash = ts.nameAt(resp, i), resp.TypeURL, r.Hash
		if string(r.TypeURL) != resp.TypeURL {
			v.TypeURL = codec.InternTypeURL(r.TypeURL)
		}
		v.Body = r.Body[:len(r.Body):len(r.Body)]
		if next < len(changed) && changed[next] == int32(i) {
			next++
		} else {
			v.Unchanged = true // or a heartbeat: either keeps what the client has
		}
	}
	return views
}

// changedViews are the views of the resources of resp at indexes changed,
// those it added or changed since the acknowledged state, for a partial
// Accepted.
func (ts *typeState) changedViews(resp *codec.Response, changed []int32) []AcceptedResource {
	if len(changed) == 0 {
		return nil
	}
	views := make([]AcceptedResource, len(changed))
	for j, i := range changed {
		r, v := &resp.Resources[i], &views[j]
		v.Name, v.TypeURL, v.Hash = ts.nameAt(resp, int(i)), resp.TypeURL, r.Hash
		if string(r.TypeURL) != resp.TypeURL {
			v.TypeURL = codec.InternTypeURL(r.TypeURL)
		}
		v.Body = r.Body[:len(r.Body):len(r.Body)]
	}
	return views
}

// droppedNames are the acknowledged names the latest push, which replaces
// its type, no longer carries (what its ACK removes), for a partial
// Accepted; nil when it carries every one. It reads the positions load
// found, which the caller trusts.
func (ts *typeState) droppedNames() []string {
	p, a := &ts.p, &ts.acked
	if !p.replace || p.ev.Diff.Removed == 0 || len(a.names) == 0 {
		return nil
	}
	seen := make([]uint64, (len(a.names)+63)/64)
	for i := range p.res {
		if pos := p.res[i].pos; pos >= 0 && int(pos) < len(a.names) {
			seen[pos/64] |= 1 << (pos % 64)
		}
	}
	var out []string
	for k, n := range a.names {
		if seen[k/64]&(1<<(k%64)) == 0 {
			out = append(out, n.Value())
		}
	}
	return out
}

// nameAt is the name of resp.Resources[i] as a string: the one the push's
// load found or interned when it is there.
func (ts *typeState) nameAt(resp *codec.Response, i int) string {
	name := resp.Resources[i].Name
	if i < len(ts.p.res) {
		if n := ts.p.res[i].name.Value(); n == string(name) {
			return n
		}
	}
	return intern(name).Value()
}

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

// Accepted is what an acknowledged push kept, handed to the outputs with
// its ACK (PushEnded.Accepted and LateAnswer.Accepted, with
// a taker of it, Tracker.TakeAccepted): its resources as the tap decoded them, for an
// output to keep what the client accepted (the retained configuration), on
// its own goroutine. The tracker is what tells pushes awaiting an answer
// from accepted ones; whoever keeps a copy of what was accepted needs no
// other account of them. The views count against Config.KeepBytes until
// the last of its leases is released (lease.go): a taker leases it
// (Taker.Lease) and releases the lease once done with the views.
type Accepted struct {
	Version string // version_info (SotW) or system_version_info (Delta)
	// Replace is set when the push is the whole set of its type (SotW LDS
	// and CDS, wildcard and unrequested types): what it lacks is removed.
	Replace bool
	// Resources are the push's resources in its order, their bodies views
	// into the push's bytes valid until the reader's lease is released.
	Resources []AcceptedResource
	// Removed are the Delta push's removed_resources, or, when Partial,
	// the names a SotW push replacing its type no longer carried.
	Removed []string
	// Bytes is what the push's kept bytes and the views take until
	// released, for an output's bound on the work waiting for it; bytes
	// shared with other streams' pushes (the same sent to each) are
	// counted by the push that kept them first.
	Bytes int64
	// NotKept says why the resources are not at hand, as for a Rejected;
	// empty when they are.
	NotKept string
	// Partial is set when Resources are only those the push added or
	// changed since the state the client acknowledged before it, as the
	// outputs were handed it (the previous Accepted of the type, or the
	// requests since): every other resource it holds stays as it was, but
	// for Removed, the names a push that replaces its type no longer
	// carried. Replace is then unset. A push of 10,000 resources that
	// changed 200 hands over 200, so that following what a client accepted
	// costs what a push changed, not what it carried.
	Partial bool

	kept keptBytes
	// takers are the takers it is leased to, a bit each; claimed those
	// that have taken their lease.
	takers  takerSet
	claimed atomic.Uint64
	leases  [inlineLeases]Lease // the first takers', by rank in takers
}

// AcceptedResource is one resource of an acknowledged push.
type AcceptedResource struct {
	Name    string
	TypeURL string // its Any's type URL
	// Body is the serialized resource, a view valid until
	// the reader's Lease.Release; nil when Unchanged and the push was kept compact
	// (only what it added or changed).
	Body []byte
	// Unchanged is set when the push carried the resource byte for byte as
	// the client had acknowledged it before, or as a heartbeat: either way
	// the client keeps what it had. Never set in a Partial Accepted.
	Unchanged bool
	// Hash is the resource's content hash as the decoder computed it
	// (codec.Resource.Hash): the same bytes, the same hash, whichever
	// stream they were sent on.
	Hash uint64
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
