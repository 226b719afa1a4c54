package track

import (
	"slices"
	"unsafe"

	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/codec"
)

// hold keeps what a NACK of resp, the type's push on stream s that send has
// just diffed against the acknowledged state, would need, letting go of
// what the previous push left. data are the bytes resp was decoded from;
// nil (the caller has no bytes to give) keeps nothing.
func (ts *typeState) hold(s *stream, resp *codec.Response, data mem.BufferSlice) {
	k, sc, h, slot := s.keep, s.sc, &ts.nack, &ts.p.held
	accepts := ts.acceptTakers != 0
	switch {
	case h.pending:
		// Superseded unanswered: send assumed it applied.
		h.unsure = true
	case h.fullSync && !ts.out.nacked && ts.out.acks > 0:
		// The previous push carried everything and was acknowledged.
		h.unsure = false
	}
	k.drop(slot)
	h.pending, h.fullSync = true, ts.p.ev.FullSync
	if data == nil || k.limit < 0 {
		return
	}
	trust := !h.unsure && ts.p.gen == ts.acked.gen
	whole := int64(data.Len())
	// The changed resources' indexes, in scratch space the diff is done
	// with, and a floor on the size of their compact form, which reads no
	// resource's body: a first push of 10 MB is not walked through again.
	changed := sc.fresh[:0]
	least, unchanged := int64(compactEnvelopeSize(resp)), 0
	for i := range resp.Resources {
		r := &resp.Resources[i]
		switch {
		case r.Heartbeat:
			// Nothing to reject: it carries no resource.
		case trust && ts.acked.unchangedAt(ts.p, resp, i):
			unchanged++
		default:
			changed = append(changed, int32(i))
			least += int64(fieldSize(2, anySize(r)))
		}
	}
	sc.fresh = changed[:0]
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
	key, hashes, names := ts.shareKeyOf(sc, resp, changed, compact, size, whole)
	// In scratch space: a push that finds its share (every stream but the
	// first of a fan-out) copies them nowhere.
	defer clear(names)
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
			need += int64(resp.ViewCopies())
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
		if accepts && !compact {
			// Kept, so the copies are left to the views; a push the
			// bound skipped leaves them to the next decode.
			resp.KeepViews()
		}
		share = &sharedPush{key: key, hashes: slices.Clone(hashes), names: slices.Clone(names), size: need - own}
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
			slot.views, slot.removed = share.views, ts.acked.droppedNames(ts.p)
		case partial:
			slot.views, slot.removed = ts.changedViews(resp, changed), ts.acked.droppedNames(ts.p)
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
// else all of them), in order, in sc's space, and a hash of them.
func (ts *typeState) shareKeyOf(sc *scratch, resp *codec.Response, changed []int32, compact bool, size, whole int64) (shareKey, []uint64, []string) {
	n := len(resp.Resources)
	if compact {
		n = len(changed)
	}
	hashes, names := slices.Grow(sc.keyHashes[:0], n)[:n], slices.Grow(sc.keyNames[:0], n)[:n]
	sc.keyHashes, sc.keyNames = hashes, names
	sum := mix(uint64(n))
	for j := range n {
		i := j
		if compact {
			i = int(changed[j])
		}
		r := &resp.Resources[i]
		hashes[j], names[j] = r.Hash, ts.p.nameAt(resp, i)
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

// acceptedViews are the views of resp's resources for an Accepted, but for
// the bodies of a push kept compact (compactViews), changed being the
// indexes of those it added or changed.
func (ts *typeState) acceptedViews(resp *codec.Response, changed []int32) []AcceptedResource {
	views := make([]AcceptedResource, len(resp.Resources))
	next := 0 // in changed
	for i := range resp.Resources {
		r, v := &resp.Resources[i], &views[i]
		v.Name, v.TypeURL, v.Hash = ts.p.nameAt(resp, i), resp.TypeURL, r.Hash
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
		v.Name, v.TypeURL, v.Hash = ts.p.nameAt(resp, int(i)), resp.TypeURL, r.Hash
		if string(r.TypeURL) != resp.TypeURL {
			v.TypeURL = codec.InternTypeURL(r.TypeURL)
		}
		v.Body = r.Body[:len(r.Body):len(r.Body)]
	}
	return views
}
