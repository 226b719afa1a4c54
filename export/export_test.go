package export

// SetSharedLockHook has f told of every shared lock an output takes on a
// frame's or an event's way through it, until the returned func is called.
func SetSharedLockHook(f func(name string)) (unset func()) {
	sharedLockHook.Store(&f)
	return func() { sharedLockHook.Store(nil) }
}
