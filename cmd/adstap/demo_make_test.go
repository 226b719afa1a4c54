//go:build demo && unix

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// TestMakeDemoExitsZeroOnCtrlC runs `make demo` as a terminal does, in a
// process group of its own, waits until the demo relays, and sends Ctrl-C
// (SIGINT) to the whole group, as the terminal does: the demo drains, and
// make does not report its recipe failed, as it did while the recipe was
// go run (which exits 1 on Ctrl-C whatever the demo does).
func TestMakeDemoExitsZeroOnCtrlC(t *testing.T) {
	leakcheck.Check(t)
	makeTool, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make demo is the README's first command: %v", err)
	}
	cmd := exec.Command(makeTool, "--no-print-directory", "demo")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "ADSTAP_ADMIN=127.0.0.1:0", "ADSTAP_INTERVAL=300ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	// The build comes first: minutes on a cold cache.
	relaying := func() bool {
		return strings.Contains(out.String(), "Ctrl-C stops.") && strings.Contains(out.String(), " ACK ")
	}
	if !xdstest.Until(5*time.Minute, relaying) {
		t.Fatalf("make demo did not start relaying:\n%s", out.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
		exited <- err // for the cleanup
	case <-time.After(time.Minute):
		t.Fatalf("make demo did not end within a minute of Ctrl-C:\n%s", out.String())
	}
	// GNU make, Ctrl-C'd itself, ends by the same signal once its recipe
	// has ended (a shell says nothing of it): what it must not do is report
	// the recipe failed ("make: *** ... Error 1" or "Interrupt"), which it
	// does when the recipe's process does not exit 0 (go run's).
	var exit *exec.ExitError
	switch {
	case err != nil && !(errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT):
		t.Fatalf("make demo after Ctrl-C: %v, want exit 0 or make's own SIGINT:\n%s", err, out.String())
	case strings.Contains(out.String(), "make: ***"):
		t.Fatalf("make reported the demo failed after Ctrl-C:\n%s", out.String())
	case !strings.Contains(out.String(), "INFO  stopped"):
		t.Fatalf("the demo did not drain after Ctrl-C:\n%s", out.String())
	}
}

// repoRoot is the directory of adstap's go.mod, above the test's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/adstap/adstap\n")) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no adstap go.mod above the test's directory")
		}
		dir = filepath.Dir(dir)
	}
}
