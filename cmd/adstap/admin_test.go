package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

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
}
