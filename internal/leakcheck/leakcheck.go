// Package leakcheck fails a test that leaves goroutines behind, checked per test as grpc-go's leakcheck does, so that a leak names the test that made it.
package leakcheck

import (
	"testing"

	"go.uber.org/goleak"
)

// Check, called first in a test, fails the test if goroutines it started
// still run once it and its cleanups are done. Goroutines running before
// the test are not its own and are ignored; opts ignore more.
func Check(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	opts = append([]goleak.Option{goleak.IgnoreCurrent()}, opts...)
	// Registered first, so it runs last: after the test's own cleanups
	// have stopped its servers and clients.
	t.Cleanup(func() {
		if err := goleak.Find(opts...); err != nil {
			t.Errorf("leakcheck: %s left goroutines behind: %v", t.Name(), err)
		}
	})
}
