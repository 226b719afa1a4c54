package export

import "sync/atomic"

// sharedLockHook, when set, is told each time a frame's or an event's way
// through an output takes a lock that more than one stream takes, by the
// lock's name. A test sets it to prove no output takes one per frame; unset,
// it costs one atomic load where such a lock is taken.
var sharedLockHook atomic.Pointer[func(name string)]

// takingShared tells the hook, if any, that the shared lock name is taken.
func takingShared(name string) {
	if f := sharedLockHook.Load(); f != nil {
		(*f)(name)
	}
}
