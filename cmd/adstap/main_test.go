package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/adstap/adstap/internal/runconfig"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func withEnv(t *testing.T, env map[string]string) {
	t.Helper()
	old := osEnv
	osEnv = func(k string) string { return env[k] }
	t.Cleanup(func() { osEnv = old })
}

func TestStartupErrorsExitWithStatus2AndOneClearLine(t *testing.T) {
	leakcheck.Check(t)
	dir := t.TempDir()
	ca := xdstest.NewCA(t)
	a := ca.Issue(t, "a", []string{"a"}, nil, false)
	b := ca.Issue(t, "b", []string{"b"}, nil, false)
	certA, _ := a.WriteFiles(t, dir, "a")
	_, keyB := b.WriteFiles(t, dir, "b")
	garbage := xdstest.WriteFiles(t, dir, "garbage.pem", []byte("not a certificate"))
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	up := "--upstream=127.0.0.1:18000"
	free := "--listen=127.0.0.1:0"
	noAdmin := "--admin=off"

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{"no command", nil, nil, "Usage:"},
		{"unknown command", []string{"serve"}, nil, `unknown command "serve"`},
		{"no upstream", []string{"run", free, noAdmin}, nil, "--upstream is required"},
		{"upstream without port", []string{"run", "--upstream=istiod", free, noAdmin}, nil, "--upstream: address \"istiod\""},
		{"upstream with a scheme", []string{"run", "--upstream=http://istiod:15010", free, noAdmin}, nil, "want host:port or unix:///path"},
		{"unknown flag", []string{"run", up, "--bogus"}, nil, "flag provided but not defined: --bogus"},
		{"stray argument", []string{"run", up, "extra"}, nil, `unexpected argument "extra"`},
		{"bad size", []string{"run", up, "--max-message-size=lots"}, nil, "--max-message-size"},
		{"bad log level", []string{"run", up, free, noAdmin, "--log-level=loud"}, nil, `--log-level "loud"`},
		{"bad env twin", []string{"run", up}, map[string]string{"ADSTAP_DRAIN_TIMEOUT": "soon"}, "ADSTAP_DRAIN_TIMEOUT"},
		{"cert file missing", []string{"run", up, free, noAdmin, "--listen-cert=" + filepath.Join(dir, "nope.pem"), "--listen-key=" + keyB}, nil, "no such file or directory"},
		{"cert without key", []string{"run", up, free, noAdmin, "--listen-cert=" + certA}, nil, "needs both a certificate and a key"},
		{"cert and key mismatch", []string{"run", up, free, noAdmin, "--listen-cert=" + certA, "--listen-key=" + keyB}, nil, "private key does not match public key"},
		{"CA not PEM", []string{"run", up, free, noAdmin, "--upstream-ca=" + garbage}, nil, "no PEM certificate"},
		{"listen address in use", []string{"run", up, noAdmin, "--listen=" + busy.Addr().String()}, nil, "address already in use"},
		{"admin address in use", []string{"run", up, free, "--admin=" + busy.Addr().String()}, nil, "--admin: listening on"},
		// A 0 that would silently mean the default.
		{"zero full-sync limit", []string{"run", up, "--full-sync-limit=0"}, nil, `invalid value "0" for flag --full-sync-limit: want a whole number, 1 or more`},
		{"zero storm threshold", []string{"run", up, "--nack-storm-threshold=0"}, nil, "--nack-storm-threshold: want a whole number, 1 or more"},
		{"zero max nodes", []string{"run", up, "--metrics-node-label", "--metrics-max-nodes=0"}, nil, "--metrics-max-nodes: want a whole number, 1 or more"},
		{"zero capture files", []string{"run", up, "--capture=x", "--capture-max-files=0"}, nil, "--capture-max-files: want a whole number, 1 or more"},
		{"zero streams", []string{"run", up, "--max-concurrent-streams=0"}, nil, "--max-concurrent-streams: want a whole number, 1 or more"},
		{"negative per connection", []string{"run", up, "--max-streams-per-connection=-1"}, nil, "--max-streams-per-connection"},
		{"zero pending", []string{"run", up}, map[string]string{"ADSTAP_MAX_PENDING_CONNECTIONS": "0"}, "ADSTAP_MAX_PENDING_CONNECTIONS: want a whole number, 1 or more"},
		{"zero output queue", []string{"run", up, "--output-queue-bytes=0"}, nil, "--output-queue-bytes"},
		// A setting that needs another to mean anything.
		{"retain bytes without retain", []string{"run", up, "--retain-max-bytes=1MiB"}, nil, "--retain-max-bytes needs --retain-resources"},
		{"retain bytes by env without retain", []string{"run", up}, map[string]string{"ADSTAP_RETAIN_MAX_BYTES": "1MiB"}, "--retain-max-bytes needs --retain-resources"},
		{"max nodes without node label", []string{"run", up, "--metrics-max-nodes=5"}, nil, "--metrics-max-nodes needs --metrics-node-label"},
		{"capture size without capture", []string{"run", up, "--capture-max-bytes=1MiB"}, nil, "--capture-max-bytes needs --capture"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			withEnv(t, tc.env)
			var stdout, stderr bytes.Buffer
			code := runCLI(context.Background(), tc.args, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tc.wantErr)
			}
			if tc.args != nil && strings.Count(strings.TrimSpace(stderr.String()), "\n") > 0 {
				t.Errorf("want one line on stderr, got:\n%s", stderr.String())
			}
		})
	}
}

func TestRunHelpListsEveryFlagWithItsEnvironmentTwin(t *testing.T) {
	leakcheck.Check(t)
	var stdout, stderr bytes.Buffer
	if code := runCLI(context.Background(), []string{"run", "--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit status %d; stderr %s", code, stderr.String())
	}
	var f runFlags
	cmd := runCommand(&f)
	listed := 0
	for _, g := range cmd.groups {
		for _, name := range g.names {
			listed++
			for _, want := range []string{"--" + name, envName(name)} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("adstap run --help does not mention %s", want)
				}
			}
		}
	}
	total := 0
	cmd.fs.VisitAll(func(*flag.Flag) { total++ })
	if listed != total {
		t.Errorf("help groups list %d flags, the flag set has %d", listed, total)
	}
}

// adstap run's flags are runconfig's table, with the same defaults, and
// nothing more: the benchmark builds its tap from that table
// (runconfig.Defaults), so a flag defined here alone would not reach it.
func TestRunFlagsAreTheTable(t *testing.T) {
	leakcheck.Check(t)
	var f runFlags
	cmd := runCommand(&f)
	table := flag.NewFlagSet("run", flag.ContinueOnError)
	runconfig.Define(runconfig.FlagSet(table), new(runconfig.Flags))
	seen := 0
	cmd.fs.VisitAll(func(fl *flag.Flag) {
		seen++
		if tf := table.Lookup(fl.Name); tf == nil || tf.DefValue != fl.DefValue || tf.Usage != fl.Usage {
			t.Errorf("--%s (default %q) is not runconfig's: %+v", fl.Name, fl.DefValue, tf)
		}
	})
	total := 0
	table.VisitAll(func(*flag.Flag) { total++ })
	if seen != total {
		t.Errorf("adstap run has %d flags, runconfig's table %d", seen, total)
	}
	if f != runconfig.Defaults() {
		t.Errorf("adstap run's flags before parsing are not runconfig.Defaults():\n%+v\n%+v", f, runconfig.Defaults())
	}
}

func TestVersion(t *testing.T) {
	leakcheck.Check(t)
	var stdout bytes.Buffer
	if code := runCLI(context.Background(), []string{"version"}, &stdout, &stdout); code != exitOK {
		t.Fatalf("exit status %d", code)
	}
	if !regexp.MustCompile(`(?m)^adstap \S+\ncommit \S+\ngo1\.\d+`).MatchString(stdout.String()) {
		t.Errorf("version output %q, want version, commit and Go version lines", stdout.String())
	}
}

// TestRunRelaysARealClient is `adstap run` as a user starts it (the upstream
// given by its environment twin), with grpc-go's xDS client resolving a
// service through it from a go-control-plane server.
func TestRunRelaysARealClient(t *testing.T) {
	leakcheck.Check(t)
	backend := xdstest.StartBackend(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	const node = "proxyless~10.0.0.9~client.default~default.svc.cluster.local"
	cp.SetSnapshot(t, node, "2026-11-30T09:00:00Z/1", xdsconfig.ResolverResources("greeter", backend))

	sockDir, err := os.MkdirTemp("", "adstap")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "xds.sock")
	withEnv(t, map[string]string{"ADSTAP_UPSTREAM": cp.Addr()})

	ctx, stop := context.WithCancel(context.Background())
	var stderr syncbuf.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- runCLI(ctx, []string{"run", "--listen=unix://" + sock, "--admin=127.0.0.1:0", "--drain-timeout=5s"}, &stderr, &stderr)
	}()
	adminRE := regexp.MustCompile(`admin=http://(127\.0\.0\.1:\d+)`)
	var admin string
	xdstest.Eventually(t, "the admin address in the log", func() bool {
		m := adminRE.FindStringSubmatch(stderr.String())
		if m != nil {
			admin = m[1]
		}
		return m != nil
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, resp.StatusCode)
		}
	}

	cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, "unix://"+sock, node)))
	callCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(callCtx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("EmptyCall through adstap run: %v\n%s", err, stderr.String())
	}
	cc.Close()

	stop() // what SIGTERM does in main
	select {
	case code := <-exited:
		if code != exitOK {
			t.Errorf("exit status %d after drain, want 0\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("adstap run did not exit within its drain timeout")
	}
	for _, want := range []string{"adstap relaying", "draining", "stopped"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, stderr.String())
		}
	}
}

// Every subcommand answers --help on stdout with status 0, including what it
// adds after its flags, and a flag it does not know on stderr, in one line
// naming the command, with the usage status.
func TestSubcommandsHelpAndBadFlags(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		help string // in the help, past the flags
	}{
		{"run", "Memory (Go's own variables)"},
		{"status", "Exit status:"},
		{"config", "--type"},
		{"inspect", "Examples:"},
		{"probe", "Checks:"},
		{"replay", "Exit status: 0"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			leakcheck.Check(t)
			var stdout, stderr bytes.Buffer
			if code := runCLI(context.Background(), []string{tc.cmd, "--help"}, &stdout, &stderr); code != exitOK || stderr.Len() != 0 {
				t.Errorf("adstap %s --help: status %d, stderr %q; want 0 and nothing", tc.cmd, code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.help) {
				t.Errorf("adstap %s --help does not say %q:\n%s", tc.cmd, tc.help, stdout.String())
			}
			stdout.Reset()
			stderr.Reset()
			code := runCLI(context.Background(), []string{tc.cmd, "--no-such-flag"}, &stdout, &stderr)
			want := "adstap " + tc.cmd + ": flag provided but not defined: --no-such-flag (see adstap " + tc.cmd + " --help)\n"
			if code != exitUsage || stderr.String() != want || stdout.Len() != 0 {
				t.Errorf("adstap %s --no-such-flag: status %d, stderr %q, stdout %q; want %d and %q", tc.cmd, code, stderr.String(), stdout.String(), exitUsage, want)
			}
		})
	}
}
