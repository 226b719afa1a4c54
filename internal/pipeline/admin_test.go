package pipeline

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/tap"
)

// startTestAdmin serves the admin pages of a tap that is not serving yet.
func startTestAdmin(t *testing.T, addr string, log *slog.Logger) (*tap.Server, *adminServer) {
	t.Helper()
	srv, err := tap.New(tap.Config{Upstream: tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := startAdmin(addr, srv, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	return srv, a
}

func TestReadyzFollowsTheListenerAndTheDrain(t *testing.T) {
	leakcheck.Check(t)
	srv, a := startTestAdmin(t, "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	status := func(path string) int {
		t.Helper()
		resp, err := http.Get("http://" + a.addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		name            string
		do              func()
		healthz, readyz int
	}{
		{"before listening", func() {}, 200, 503},
		{"listening", a.setListening, 200, 200},
		{"draining", func() { srv.Shutdown(context.Background()) }, 200, 503},
	}
	for _, s := range steps {
		s.do()
		if got := status("/healthz"); got != s.healthz {
			t.Errorf("%s: /healthz = %d, want %d", s.name, got, s.healthz)
		}
		if got := status("/readyz"); got != s.readyz {
			t.Errorf("%s: /readyz = %d, want %d", s.name, got, s.readyz)
		}
	}
}

func TestAdminWarnsWhenReachableFromOutside(t *testing.T) {
	leakcheck.Check(t)
	for _, tc := range []struct {
		addr     string
		wantWarn bool
	}{
		{"127.0.0.1:0", false},
		{"localhost:0", false},
		{"0.0.0.0:0", true},
	} {
		var log syncbuf.Buffer
		startTestAdmin(t, tc.addr, slog.New(slog.NewTextHandler(&log, nil)))
		if got := strings.Contains(log.String(), "reachable from outside this host"); got != tc.wantWarn {
			t.Errorf("admin on %s: warned %v, want %v (log: %s)", tc.addr, got, tc.wantWarn, log.String())
		}
	}
}
