// Package shared holds what the outputs of export share and nobody outside
// export needs: the hook on locks streams share, the words of their lines,
// the JSON of their pages.
package shared

import (
	"log/slog"
	"sync/atomic"
)

// lockHook, when set, is told each time a frame's or an event's way
// through an output takes a lock that more than one stream takes, by the
// lock's name. A test sets it to prove no output takes one per frame; unset,
// it costs one atomic load where such a lock is taken.
var lockHook atomic.Pointer[func(name string)]

// Taking tells the hook, if any, that the shared lock name is taken. It is
// called on the line before the lock is taken: export's lock test reads
// the source for it.
func Taking(name string) {
	if f := lockHook.Load(); f != nil {
		(*f)(name)
	}
}

// SetLockHook has f told of every shared lock an output takes on a frame's
// or an event's way through it, until the returned func is called. For
// tests.
func SetLockHook(f func(name string)) (unset func()) {
	lockHook.Store(&f)
	return func() { lockHook.Store(nil) }
}

// Logger is l, or one that discards when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
