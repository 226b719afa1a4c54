package track

import "unsafe"

// CollideNames makes the names of every set share one of three index keys,
// so that tests exercise the index's handling of collisions, until undo is
// called. Tests using it must not run in parallel.
func CollideNames() (undo func()) {
	k, ks := nameKey, nameKeyString
	nameKey = func(b []byte) uint64 { return uint64(len(b) % 3) }
	nameKeyString = func(s string) uint64 { return uint64(len(s) % 3) }
	return func() { nameKey, nameKeyString = k, ks }
}

// SharedWith reports whether streams a and b hold one acknowledged state
// and one resources table of typeURL, shared.
func (t *Tracker) SharedWith(a, b uint64, typeURL string) (acked, table bool) {
	x, y := t.typeOf(a, typeURL), t.typeOf(b, typeURL)
	acked = x.acked.shared != nil && x.acked.shared == y.acked.shared
	table = x.res != nil && y.res != nil && x.res.shared != nil && x.res.shared == y.res.shared
	return acked, table
}

// StateShared reports whether stream id's acknowledged state of typeURL is
// looked up tap-wide (shared, if only with itself).
func (t *Tracker) StateShared(id uint64, typeURL string) bool {
	return t.typeOf(id, typeURL).acked.shared != nil
}

// LoadedShared reports whether the latest pushes of typeURL to streams a
// and b read one loaded list of resources.
func (t *Tracker) LoadedShared(a, b uint64, typeURL string) bool {
	x, y := t.typeOf(a, typeURL), t.typeOf(b, typeURL)
	return x.p != nil && y.p != nil && x.p.resShared && y.p.resShared && len(x.p.res) > 0 &&
		unsafe.SliceData(x.p.res) == unsafe.SliceData(y.p.res)
}

// Subscribed reports the names stream id subscribes to of typeURL, and
// whether it holds them shared with stream other.
func (t *Tracker) Subscribed(id, other uint64, typeURL string) (names []string, shared bool) {
	x, y := t.typeOf(id, typeURL), t.typeOf(other, typeURL)
	for _, n := range x.sub.names {
		names = append(names, n.Value())
	}
	return names, x.sub.shared != nil && x.sub.shared == y.sub.shared
}

// typeOf is stream id's state of typeURL.
func (t *Tracker) typeOf(id uint64, typeURL string) *typeState {
	v, _ := t.streams.Load(id)
	s := v.(*stream)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookup(typeURL)
}
