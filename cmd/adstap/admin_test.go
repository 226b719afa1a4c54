package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// startTestAdmin serves the admin pages of a tap that is not serving yet.
func startTestAdmin(t *testing.T) (*tap.Server, *adminServer) {
	t.Helper()
	srv, err := tap.New(tap.Config{Upstream: tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := startAdmin("127.0.0.1:0", srv, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	return srv, a
}

func TestReadyzFollowsTheListenerAndTheDrain(t *testing.T) {
	leakcheck.Check(t)
	srv, a := startTestAdmin(t)
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

func TestAdminExposesOnlyWhatItIsToldTo(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	for _, tc := range []struct {
		name      string
		flags     []string
		wantPprof int
	}{
		{"default", nil, http.StatusNotFound},
		{"--pprof", []string{"--pprof"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log syncbuf.Buffer
			_, admin := startTracedTap(t, cp.Addr(), &log, tc.flags...)
			resp, err := http.Get("http://" + admin + "/debug/pprof/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.wantPprof {
				t.Errorf("GET /debug/pprof/ = %d, want %d", resp.StatusCode, tc.wantPprof)
			}
			if strings.Contains(log.String(), "reachable from outside") {
				t.Error("a loopback admin address was warned about")
			}
		})
	}
	t.Run("non-loopback admin warns", func(t *testing.T) {
		var log syncbuf.Buffer
		srv, err := tap.New(tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := startAdmin("0.0.0.0:0", srv, slog.New(slog.NewTextHandler(&log, nil)), nil)
		if err != nil {
			t.Fatal(err)
		}
		a.close()
		if !strings.Contains(log.String(), "reachable from outside this host") {
			t.Errorf("no warning for an admin address on every interface: %s", log.String())
		}
	})
}
