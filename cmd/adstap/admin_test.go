package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/adstap/adstap/tap"
)

func TestReadyzFollowsTheListenerAndTheDrain(t *testing.T) {
	srv, err := tap.New(tap.Config{Upstream: tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := startAdmin("127.0.0.1:0", srv, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
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
