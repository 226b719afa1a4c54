package track

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/adstap/adstap/codec"
)

// acknowledged is what the client accepted of one type: the names and
// content hashes of its acknowledged state (the ackedSet), whether that
// state means something yet, and its generation. Only an answer (apply) and
// a change of subscription (prune) change it.
type acknowledged struct {
	ackedSet
	// baseline is set once the state means something: a push of the type
	// was acknowledged (or assumed applied), so an empty set is a known
	// empty state.
	baseline bool
	// gen changes whenever the state or the subscription change, so a push
	// identical to the previous one can reuse its diff, and the positions
	// load found in the state are known to be stale.
	gen uint64
}

// prune drops acknowledged resources the client no longer wants (sub):
// an unsubscribed resource leaves the client, so it must not count as
// removed (or unchanged) in the next push.
// It is called on every subscription change, which also invalidates the
// diff a repeated push could otherwise reuse. What remains keeps its order,
// which the next push most likely follows.
func (a *acknowledged) prune(sub *subscription) {
	a.gen++
	if sub.wildcard {
		return
	}
	a.own()
	keep := 0
	var c cursor
	for i, n := range a.names {
		k := sub.findName(n, c.guess())
		c.found(k)
		if k < 0 {
			continue
		}
		a.names[keep], a.hashes[keep] = n, a.hashes[i]
		keep++
	}
	if keep < len(a.names) {
		clear(a.names[keep:])
		a.reset(a.names[:keep], a.hashes[:keep])
	}
}

// load makes resp the type's latest push, p. Each resource is looked up in the
// acknowledged state once, here, and its position kept for diff and apply.
// The lookup starts where the previous resource was found, so a push that
// lists the acknowledged names in their order, as control planes do push
// after push, costs a comparison of bytes per resource and no hashing.
//
// The names the decoder hands over are views into a buffer about to be
// released; a name the stream does not hold yet (in the acknowledged state,
// the previous push or the subscription) is interned.
func (a *acknowledged) load(p *push, sub *subscription, resp *codec.Response) {
	p.removed = append(p.removed[:0], resp.RemovedResources...)
	shared := a.shared
	if shared != nil && !shared.found.Load() {
		shared = nil // held by this stream alone
	}
	if shared != nil {
		if l, _ := shared.memo.Load().(*loadedPush); l != nil && l.matches(resp) {
			p.dropApplied()
			p.res, p.resShared, p.fresh = l.res, true, l.fresh
			return
		}
	}
	old := p.res
	res := old[:0]
	var oldBuf *resBuf // given back once the loop no longer reads old
	if cap(res) < len(resp.Resources) || p.resShared {
		oldBuf = p.buf
		res, p.buf = newPushedRes(len(resp.Resources))
	}
	heartbeats := false
	var ac, sc cursor
	fresh := 0
	for i := range resp.Resources {
		r := &resp.Resources[i]
		var n name
		g := ac.guess()
		var pos int
		if uint(g) < uint(len(a.names)) && !r.Heartbeat && a.hashes[g] == r.Hash && len(a.names[g].Value()) == len(r.Name) {
			// The resource where the last push had it, byte for byte as
			// acknowledged: its hash covers its name, so the name is not
			// compared. Comparing it cost a cache miss per resource on a
			// 10 MB push, and trusting a 64-bit hash is what the diff does
			// anyway to call a resource unchanged.
			pos = g
		} else {
			pos = a.findBytes(r.Name, g)
		}
		ac.found(pos)
		if pos < 0 {
			fresh++
		}
		switch {
		case pos >= 0:
			n = a.names[pos]
		case i < len(old) && old[i].name.Value() == string(r.Name):
			// Read before res overwrites it: res[i] is old[i].
			n = old[i].name
		default:
			k := sub.findBytes(r.Name, sc.guess())
			sc.found(k)
			if k >= 0 {
				n = sub.names[k]
			} else {
				n = intern(r.Name)
			}
		}
		heartbeats = heartbeats || r.Heartbeat
		res = append(res, pushedRes{name: n, hash: r.Hash, pos: int32(pos), heartbeat: r.Heartbeat})
	}
	switch {
	case oldBuf != nil:
		oldBuf.giveBack(old)
	case p.resShared:
	case len(res) < len(old):
		clear(old[len(res):]) // res is old's slice: what is past it must not pin names
	}
	p.res, p.fresh, p.resShared = res, int32(fresh), false
	if shared != nil && p.buf != nil && len(res) >= sharedFrom && !heartbeats {
		// For the streams that share the state and are sent the same: the
		// slice is theirs to read from now on, and this push's too. A
		// large push's slice (no buf) stays its stream's own for the
		// next push.
		shared.memo.Store(&loadedPush{res: res, fresh: p.fresh})
		p.buf, p.resShared = nil, true
	}
}

// loadedPush is a push's resources as acknowledged.load found them in an
// acknowledged state shared tap-wide, read-only. A control plane sends the
// same push to the streams that share a state (a change to every sidecar of
// a mesh at once), and each would load it into a slice of its own, all of
// them in flight together until their ACKs: a fan-out to 1,000 streams of
// 200 resources made 6 MB of fresh memory and looked every resource up
// 1,000 times. The first stream's load is kept on the shared state, and
// the others' pushes read it.
type loadedPush struct {
	res   []pushedRes
	fresh int32
}

// matches reports whether resp carries the resources l was loaded from, in
// its order: the same content hashes (which cover the names) and names of
// the same length, as load itself trusts them.
func (l *loadedPush) matches(resp *codec.Response) bool {
	if len(l.res) != len(resp.Resources) {
		return false
	}
	for i := range resp.Resources {
		r, m := &resp.Resources[i], &l.res[i]
		if r.Heartbeat || m.hash != r.Hash || len(m.name.Value()) != len(r.Name) {
			return false
		}
	}
	return true
}

// diff compares the latest push, p, with the acknowledged state and tells
// whether it is a full sync: it carries the whole subscription, sub, and
// something.
func (a *acknowledged) diff(p *push, sub *subscription, sc *scratch, maxNames int) (d Diff, full bool) {
	seen := sc.marksFor(len(a.names))
	matched := 0
	for i := range p.res {
		r := &p.res[i]
		if r.pos < 0 {
			// A heartbeat for something the client does not have adds nothing.
			if !r.heartbeat {
				d.Added++
			}
			continue
		}
		if seen[r.pos] != 0 {
			continue // the same name twice in one push
		}
		seen[r.pos] = 1
		matched++
		if r.heartbeat || a.hashes[r.pos] == r.hash {
			d.Unchanged++
		} else {
			d.Changed++
		}
	}
	if d.Added > 0 || d.Changed > 0 {
		d.AddedNames, d.ChangedNames = a.diffNames(p, seen, min(d.Added, maxNames), min(d.Changed, maxNames))
	}
	switch {
	case p.delta:
		for _, name := range p.removed {
			if k := a.findString(name, -1); k >= 0 && seen[k] == 0 {
				seen[k] = 1
				d.Removed++
				d.RemovedNames = appendCapped(d.RemovedNames, name, maxNames)
			}
		}
	case p.replace:
		d.Removed = len(a.names) - matched
		if d.Removed > 0 {
			d.RemovedNames = a.firstUnmarked(seen, maxNames)
			for i, n := range d.RemovedNames {
				d.RemovedNames[i] = shown(n)
			}
		}
	}
	// Otherwise (SotW EDS, RDS, SDS with explicit names) a missing name is
	// one the client keeps.

	if len(p.res) == 0 {
		return d, false
	}
	switch {
	case p.replace:
		full = true
	case p.delta && sub.wildcard:
		// A Delta wildcard push is whole when it leaves nothing of the
		// client's state untouched: istiod's LDS and RDS pushes carry
		// every resource and remove the rest.
		full = matched+d.Removed == len(a.names)
	default:
		full = sub.carriedBy(p.res, sc)
	}
	return d, full
}

// firstUnmarked returns, sorted, the first maxNames acknowledged names not
// marked seen: a stable sample of what a push removed, without sorting the
// whole state.
func (a *acknowledged) firstUnmarked(seen []int32, maxNames int) []string {
	var out []string
	for pos, n := range a.names {
		if seen[pos] != 0 {
			continue
		}
		name := n.Value()
		if len(out) == maxNames && name >= out[len(out)-1] {
			continue
		}
		i := len(out)
		for i > 0 && out[i-1] > name {
			i--
		}
		if len(out) < maxNames {
			out = append(out, "")
		}
		copy(out[i+1:], out[i:len(out)-1])
		out[i] = name
	}
	return out
}

// apply makes the result of the latest push, p, the acknowledged state;
// what sub does not want stays out of it.
func (a *acknowledged) apply(p *push, sub *subscription, sc *scratch) {
	if p.gen != a.gen {
		a.locate(p) // the state changed since the push was loaded
	}
	a.own()
	if p.replace {
		a.applyWhole(p, sub, sc)
	} else {
		a.applyMerge(p, sub, sc)
	}
	for _, name := range p.removed {
		if k := a.findString(name, -1); k >= 0 {
			a.own() // applyWhole may have shared the state it built
			a.removeAt(k)
		}
	}
	a.baseline = true
	a.gen++
}

// locate finds the resources of the latest push, p, in the acknowledged
// state again.
func (a *acknowledged) locate(p *push) {
	p.ownRes()
	var c cursor
	p.fresh = 0
	for i := range p.res {
		r := &p.res[i]
		k := a.findName(r.name, c.guess())
		c.found(k)
		r.pos = int32(k)
		if k < 0 {
			p.fresh++
		}
	}
}

// applyWhole applies a push that replaces the whole state: what it lacks is
// removed, and the state takes the push's order, which the next push will
// most likely follow. A name listed twice keeps its first position and its
// last body; a heartbeat keeps what the client had.
func (a *acknowledged) applyWhole(p *push, sub *subscription, sc *scratch) {
	if a.sameOrder(p) {
		// Nothing added, removed or moved: only bodies change.
		for i := range p.res {
			if !p.res[i].heartbeat {
				a.hashes[i] = p.res[i].hash
			}
		}
		return
	}
	where := sc.marksFor(len(a.names)) // position in the new state + 1
	names, hashes, fresh := sc.state(len(p.res))
	placed := sc.added(int(p.fresh)) // new names, for the rare one listed twice
	var c cursor
	for i := range p.res {
		r := &p.res[i]
		if r.pos < 0 {
			if r.heartbeat || !sub.wants(r.name, &c) {
				continue
			}
			if k, ok := placed.find(r.name); ok {
				hashes[k] = r.hash
				continue
			}
			placed.add(r.name, int32(len(names)))
			fresh = append(fresh, int32(len(names)))
			names = append(names, r.name)
			hashes = append(hashes, r.hash)
			continue
		}
		// The state holds only names the client wants (prune).
		if w := where[r.pos]; w != 0 {
			if !r.heartbeat {
				hashes[w-1] = r.hash
			}
			continue
		}
		h := a.hashes[r.pos]
		if !r.heartbeat {
			h = r.hash
		}
		names = append(names, r.name)
		hashes = append(hashes, h)
		where[r.pos] = int32(len(names))
	}
	placed.done()
	a.rewrite(names, hashes, where, fresh)
	sc.done(names, hashes, fresh)
}

// sameOrder reports whether the latest push, p, lists exactly the acknowledged
// names, in their order. The client wants them all: the state holds nothing
// else.
func (a *acknowledged) sameOrder(p *push) bool {
	if len(p.res) != len(a.names) {
		return false
	}
	for i := range p.res {
		if int(p.res[i].pos) != i {
			return false
		}
	}
	return true
}

// applyMerge applies a push that updates part of the state: new names are
// appended, and what the push lacks is kept.
func (a *acknowledged) applyMerge(p *push, sub *subscription, sc *scratch) {
	// A stream's first push of the type: the state is built in scratch and
	// adopted (ackedSet.adopt), as a rewrite that outgrows its slices is.
	first := len(a.names) == 0 && int(p.fresh) >= sharedFrom
	if first {
		a.names, a.hashes, _ = sc.state(int(p.fresh))
	} else if fresh := int(p.fresh); fresh > 1 {
		// Grown once, to what the push may add, rather than by doubling.
		a.names = slices.Grow(a.names, fresh)
		a.hashes = slices.Grow(a.hashes, fresh)
	}
	placed := sc.added(int(p.fresh)) // new names, for the rare one listed twice
	defer placed.done()
	var c cursor
	for i := range p.res {
		r := &p.res[i]
		if r.heartbeat {
			continue
		}
		if r.pos >= 0 {
			a.hashes[r.pos] = r.hash // the state holds only names the client wants
			continue
		}
		if !sub.wants(r.name, &c) {
			continue
		}
		if k, ok := placed.find(r.name); ok {
			a.hashes[k] = r.hash
			continue
		}
		placed.add(r.name, int32(len(a.names)))
		a.add(r.name, r.hash)
	}
	if first {
		names, hashes := a.names, a.hashes
		if len(names) >= sharedFrom {
			a.adopt(names, hashes)
		} else {
			a.names, a.hashes = slices.Clone(names), slices.Clone(hashes)
		}
		sc.done(names, hashes, sc.fresh)
	}
}

// unchangedAt reports whether resp.Resources[i] is, byte for byte, what the
// client acknowledged under its name. It reads what load found: the
// resource's position in the acknowledged state and its hash. A resource
// send did not load at that index (a re-sent push whose diff was reused
// may list its resources in another order) counts as changed.
func (a *acknowledged) unchangedAt(p *push, resp *codec.Response, i int) bool {
	if i >= len(p.res) {
		return false
	}
	r, h := &p.res[i], resp.Resources[i].Hash
	return !r.heartbeat && r.hash == h && r.pos >= 0 && int(r.pos) < len(a.hashes) && a.hashes[r.pos] == h
}

// droppedNames are the acknowledged names push p, which replaces
// its type, no longer carries (what its ACK removes), for a partial
// Accepted; nil when it carries every one. It reads the positions load
// found, which the caller trusts.
func (a *acknowledged) droppedNames(p *push) []string {
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

// diffNames returns the first names of what diff counted as added and
// changed, nAdded and nChanged of them, in the push's order. It walks the
// push again, as far as it takes to find them (a push changing 2 % of its
// resources, its first maxNames changes), rather than collecting them in
// diff's loop, which that made slower; and gathers them on the stack, to
// copy them once into lists of their exact size: grown by append, they
// would be garbage at every push. A resource listed twice counts once, as
// in diff: diff marked each one seen (1), this walk marks the first it
// meets (2).
func (a *acknowledged) diffNames(p *push, seen []int32, nAdded, nChanged int) (addedNames, changedNames []string) {
	var addedBuf, changedBuf [stackNames]string
	added, changed := addedBuf[:0], changedBuf[:0]
	for i := range p.res {
		if len(added) == nAdded && len(changed) == nChanged {
			break
		}
		r := &p.res[i]
		if r.pos < 0 {
			if !r.heartbeat && len(added) < nAdded {
				added = append(added, shown(r.name.Value()))
			}
			continue
		}
		if seen[r.pos] == 2 {
			continue
		}
		seen[r.pos] = 2
		if !r.heartbeat && a.hashes[r.pos] != r.hash && len(changed) < nChanged {
			changed = append(changed, shown(r.name.Value()))
		}
	}
	return cloneNames(added), cloneNames(changed)
}

// stackNames is how many names of a diff are gathered on the stack: the
// default Config.MaxNames. A larger MaxNames works the same, with append
// moving the lists to the heap past it.
const stackNames = 20

// cloneNames copies a list of names, nil when it is empty as a list grown
// by append from nil would be.
func cloneNames(names []string) []string {
	if len(names) == 0 {
		return nil
	}
	return slices.Clone(names)
}

func appendCapped(names []string, name string, maxNames int) []string {
	if len(names) >= maxNames {
		return names
	}
	return append(names, shown(name))
}

// shown is a resource name as events carry it. The tracker keys on the
// bytes a control plane sent, which need not be UTF-8; what leaves the
// tracker must be, or a span's attributes fail to export (see codec.Text).
func shown(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	return strings.ToValidUTF8(name, "\uFFFD")
}
