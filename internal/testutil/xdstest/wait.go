package xdstest

import (
	"testing"
	"time"
)

// WaitTimeout is how long Eventually waits: far longer than anything takes
// on a loaded machine, so reaching it means the condition will never hold.
const WaitTimeout = 10 * time.Second

// Eventually polls cond until it holds and fails the test, naming what it
// waited for, if it still does not after WaitTimeout. Use it for state that
// offers no event to wait on (a log, a counter, another process); the poll
// interval only decides how soon the test notices.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, WaitTimeout, what, cond)
}

// EventuallyWithin is Eventually with a timeout of d.
func EventuallyWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(d, cond) {
		t.Fatalf("waited %v for %s", d, what)
	}
}

// Until polls cond until it holds or d has passed, and says which: for a
// caller that goes on either way, or that may not fail the test from its
// goroutine.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
