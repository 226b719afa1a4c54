//go:build !unix

package xdstest

import "testing"

// RefusingAddr returns a loopback address that refuses connections: that of
// a closed listener (on unix, a socket held bound for the test).
func RefusingAddr(t testing.TB) string {
	t.Helper()
	lis := ListenTCP(t)
	addr := lis.Addr().String()
	lis.Close()
	return addr
}
