package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
)

func TestProbeExitsWithTheAdminServersAnswer(t *testing.T) {
	leakcheck.Check(t)
	// A tap that serves, and whose admin server outlives its drain.
	var f runFlags
	if err := runCommand(&f).parse([]string{"--listen=127.0.0.1:0", "--admin=127.0.0.1:0", "--upstream=127.0.0.1:1"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	rt, err := startTap(f, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	// An address nothing listens on: a port that was just free.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	// What answers for Envoy's readiness in a pod: its :15021 listener.
	envoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz/ready" {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "LIVE")
	}))
	defer envoy.Close()
	probe := func(env map[string]string, args ...string) (int, string) {
		t.Helper()
		withEnv(t, env)
		var out, errOut syncbuf.Buffer
		code := runCLI(context.Background(), append([]string{"probe"}, args...), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	admin := "--admin=" + rt.AdminAddr()
	for _, tc := range []struct {
		name     string
		do       func()
		env      map[string]string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"healthz", nil, nil, []string{admin, "healthz"}, exitOK, "ok"},
		{"readyz is the default", nil, nil, []string{admin}, exitOK, "ready"},
		{"the address from ADSTAP_ADMIN", nil, map[string]string{"ADSTAP_ADMIN": rt.AdminAddr()}, []string{"readyz"}, exitOK, "ready"},
		{"nothing listening", nil, nil, []string{"--admin=" + closed, "healthz"}, exitFailure, "connection refused"},
		{"an unknown check", nil, nil, []string{admin, "livez"}, exitUsage, `unknown check "livez"`},
		{"admin off", nil, nil, []string{"--admin=off"}, exitUsage, "nothing to ask"},
		{"also ready", nil, nil, []string{admin, "--also-ready=" + envoy.URL + "/healthz/ready", "readyz"}, exitOK, "LIVE"},
		{"also ready, not yet", nil, nil, []string{admin, "--also-ready=" + envoy.URL + "/not-ready", "readyz"}, exitFailure, "503"},
		{"also ready, not a URL", nil, nil, []string{admin, "--also-ready=" + closed, "readyz"}, exitUsage, "want an http:// URL"},
		{"draining", func() { rt.Server.Shutdown(context.Background()) }, nil, []string{admin, "readyz"}, exitFailure, "draining"},
	} {
		if tc.do != nil {
			tc.do()
		}
		code, out := probe(tc.env, tc.args...)
		if code != tc.wantCode || !strings.Contains(out, tc.wantOut) {
			t.Errorf("%s: adstap probe %s = %d, %q; want %d and %q", tc.name, strings.Join(tc.args, " "), code, out, tc.wantCode, tc.wantOut)
		}
	}
}
