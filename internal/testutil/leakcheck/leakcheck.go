// Package leakcheck fails a test that leaves goroutines behind, checked per test as grpc-go's leakcheck does, so that a leak names the test that made it.
package leakcheck

import (
	"runtime"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// Check, called first in a test, fails the test if goroutines it started
// still run once it and its cleanups are done. Goroutines running before
// the test are not its own and are ignored, and so is the runtime's
// (RuntimeGoroutines); opts ignore more.
func Check(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	opts = append([]goleak.Option{goleak.IgnoreCurrent(), RuntimeGoroutines}, opts...)
	// Registered first, so it runs last: after the test's own cleanups
	// have stopped its servers and clients.
	t.Cleanup(func() {
		if err := goleak.Find(opts...); err != nil {
			t.Errorf("leakcheck: %s left goroutines behind: %v", t.Name(), err)
		}
	})
}

// RuntimeGoroutines ignores the runtime's goroutine that runs cleanups
// (runtime.AddCleanup): idle, the runtime hides it, but while it runs the
// cleanups of values stored weakly (internal/weakintern; unique's, in the
// libraries) — thousands after a test of a large push — it shows, in
// whichever test is then checked. For a
// package's goleak.VerifyTestMain too.
var RuntimeGoroutines = goleak.IgnoreTopFunction("runtime.runCleanups")

// Count returns how many goroutines have every one of parts in their
// stack, for tests that wait for goroutines to park somewhere or to end.
func Count(parts ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if containsAll(g, parts) {
			count++
		}
	}
	return count
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
