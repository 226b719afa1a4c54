package track

import (
	"github.com/adstap/adstap/codec"
	"github.com/cespare/xxhash/v2"
)

// Salts keep a heartbeat or a removal from cancelling out a resource body
// that happens to hash to the same value.
const (
	heartbeatSalt = 0x9e3779b97f4a7c15
	removedSalt   = 0xc2b2ae3d27d4eb4f
)

// contentOf identifies what a response carries, whatever its version, nonce
// and resource order: the sum of the mixed hashes of its resources (and, in
// Delta, of the names it removes). A sum is order-independent yet, unlike a
// xor, does not cancel a resource sent twice.
func contentOf(resp *codec.Response) uint64 {
	h := mix(uint64(len(resp.Resources)))
	for i := range resp.Resources {
		r := &resp.Resources[i]
		x := r.Hash
		if r.Heartbeat {
			x = xxhash.Sum64(r.Name) ^ heartbeatSalt
		}
		h += mix(x)
	}
	for _, name := range resp.RemovedResources {
		h += mix(xxhash.Sum64String(name) ^ removedSalt)
	}
	return h
}

// mix is splitmix64's finalizer: it spreads the bits of a hash so that sums
// of related hashes do not collide.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// load copies a response's resources into the latest push. The names the
// decoder hands over are views into a buffer about to be released, so they
// are copied, except when the previous push or the acknowledged state already
// holds the same name: then that string is reused, which makes a control
// plane re-sending the same names free of allocations.
func (ts *typeState) load(resp *codec.Response) {
	old := ts.p.res
	res := old[:0]
	for i := range resp.Resources {
		r := &resp.Resources[i]
		var name string
		if i < len(old) && old[i].name == string(r.Name) {
			name = old[i].name
		} else if e, ok := ts.acked[string(r.Name)]; ok {
			name = e.name
		} else {
			name = string(r.Name)
		}
		res = append(res, pushedRes{name: name, hash: r.Hash, heartbeat: r.Heartbeat})
	}
	ts.p.res = res
	ts.p.removed = append(ts.p.removed[:0], resp.RemovedResources...)
}

// diff compares the latest push with the acknowledged state and tells whether
// it is a full sync: it carries the whole subscribed set, and something.
func (ts *typeState) diff(maxNames int) (d Diff, full bool) {
	p := &ts.p
	ts.mark++
	seen := ts.mark
	matched := 0
	for _, r := range p.res {
		e, ok := ts.acked[r.name]
		if !ok {
			// A heartbeat for something the client does not have adds nothing.
			if !r.heartbeat {
				d.Added++
				d.AddedNames = appendCapped(d.AddedNames, r.name, maxNames)
			}
			continue
		}
		if e.mark == seen {
			continue // the same name twice in one push
		}
		e.mark = seen
		ts.acked[r.name] = e
		matched++
		if r.heartbeat || e.hash == r.hash {
			d.Unchanged++
		} else {
			d.Changed++
			d.ChangedNames = appendCapped(d.ChangedNames, r.name, maxNames)
		}
	}
	switch {
	case p.delta:
		for _, name := range p.removed {
			if e, ok := ts.acked[name]; ok && e.mark != seen {
				e.mark = seen
				ts.acked[name] = e
				d.Removed++
				d.RemovedNames = appendCapped(d.RemovedNames, name, maxNames)
			}
		}
	case p.replace:
		d.Removed = len(ts.acked) - matched
		if d.Removed > 0 {
			d.RemovedNames = ts.firstUnmarked(seen, maxNames)
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
	case p.delta && ts.wildcard:
		// A Delta wildcard push is whole when it leaves nothing of the
		// client's state untouched: istiod's LDS and RDS pushes carry
		// every resource and remove the rest.
		full = matched+d.Removed == len(ts.acked)
	default:
		full = ts.carriesSubscription()
	}
	return d, full
}

// carriesSubscription reports whether the latest push names every explicitly
// subscribed resource.
func (ts *typeState) carriesSubscription() bool {
	if len(ts.sub) == 0 {
		return false
	}
	ts.mark++
	seen := ts.mark
	n := 0
	for _, r := range ts.p.res {
		if v, ok := ts.sub[r.name]; ok && v != seen {
			ts.sub[r.name] = seen
			n++
		}
	}
	return n == len(ts.sub)
}

// firstUnmarked returns, sorted, the first maxNames acknowledged names not
// marked seen: a stable sample of what a push removed, without sorting the
// whole state.
func (ts *typeState) firstUnmarked(seen uint64, maxNames int) []string {
	var out []string
	for name, e := range ts.acked {
		if e.mark == seen {
			continue
		}
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

// apply makes the latest push's result the acknowledged state.
func (ts *typeState) apply() {
	p := &ts.p
	ts.mark++
	seen := ts.mark
	for _, r := range p.res {
		e, ok := ts.acked[r.name]
		if r.heartbeat {
			if ok {
				e.mark = seen
				ts.acked[r.name] = e
			}
			continue
		}
		// A client keeps only what it asked for.
		if !ts.subscribed(r.name) {
			continue
		}
		if !ok {
			e.name = r.name
		}
		e.hash, e.mark = r.hash, seen
		ts.acked[e.name] = e
	}
	if p.replace {
		for name, e := range ts.acked {
			if e.mark != seen {
				delete(ts.acked, name)
			}
		}
	}
	for _, name := range p.removed {
		delete(ts.acked, name)
	}
	ts.baseline = true
	ts.gen++
}

func appendCapped(names []string, name string, maxNames int) []string {
	if len(names) >= maxNames {
		return names
	}
	return append(names, name)
}
