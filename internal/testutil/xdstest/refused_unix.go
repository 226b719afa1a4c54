//go:build unix

package xdstest

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusingAddr returns a loopback address that refuses connections for the
// rest of the test: a TCP socket bound to it and never listening. A port
// taken from a closed listener can be bound again by any process on a busy
// machine, or picked as the source port of a dial to it, which then connects
// to itself; a port held bound can be neither.
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("xdstest: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("xdstest: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("xdstest: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
