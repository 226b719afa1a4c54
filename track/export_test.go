package track

// CollideNames makes the names of every set share one of three index keys,
// so that tests exercise the index's handling of collisions, until undo is
// called. Tests using it must not run in parallel.
func CollideNames() (undo func()) {
	k, ks := nameKey, nameKeyString
	nameKey = func(b []byte) uint64 { return uint64(len(b) % 3) }
	nameKeyString = func(s string) uint64 { return uint64(len(s) % 3) }
	return func() { nameKey, nameKeyString = k, ks }
}
