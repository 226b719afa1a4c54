package xdstest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// ListenTCP listens on an ephemeral loopback port. The listener is closed at
// cleanup in case nothing ever serves on it.
func ListenTCP(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("xdstest: listen tcp: %v", err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis
}

// ListenUnix listens on a Unix socket and returns it with its gRPC target
// ("unix:///abs/path"), the way Envoy reaches istio-agent. The socket lives
// in a fresh directory under os.TempDir rather than t.TempDir because
// t.TempDir embeds the test name and easily exceeds the 108-byte sun_path
// limit.
func ListenUnix(t testing.TB) (net.Listener, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "xds")
	if err != nil {
		t.Fatalf("xdstest: temp dir for unix socket: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("xdstest: listen unix %s: %v", path, err)
	}
	t.Cleanup(func() { lis.Close() })
	return lis, "unix://" + path
}

// Target turns a listener address into something grpc.NewClient accepts:
// Unix socket paths need the unix scheme, TCP addresses resolve as they are.
func Target(addr net.Addr) string {
	if addr.Network() == "unix" {
		return "unix://" + addr.String()
	}
	return addr.String()
}
