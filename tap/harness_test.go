package tap_test

import (
	"context"
	"crypto/sha256"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// startTap runs a tap in front of cfg.Upstream and returns its listener address.
func startTap(t testing.TB, cfg tap.Config, lis net.Listener) (*tap.Server, tap.Address) {
	t.Helper()
	if lis == nil {
		lis = xdstest.ListenTCP(t)
	}
	srv, err := tap.New(cfg)
	if err != nil {
		t.Fatalf("tap.New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, xdstest.AddressOf(lis)
}

// digestLog collects sha256 digests of frames from several goroutines.
type digestLog struct {
	mu      sync.Mutex
	digests [][32]byte
}

func (d *digestLog) add(b []byte) {
	sum := sha256.Sum256(b)
	d.mu.Lock()
	d.digests = append(d.digests, sum)
	d.mu.Unlock()
}

func (d *digestLog) get() [][32]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][32]byte(nil), d.digests...)
}
