package leakcheck

import (
	"runtime"
	"strings"
	"testing"
)

// fakeT records what Check reports instead of failing the real test.
type fakeT struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Name() string                   { return "TestFake" }
func (f *fakeT) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Errorf(format string, a ...any) { f.errs = append(f.errs, format) }

func (f *fakeT) finish() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestCheckFindsAGoroutineLeftBehind(t *testing.T) {
	Check(t)
	stop := make(chan struct{})
	ft := &fakeT{TB: t}
	Check(ft)
	go func() { <-stop }()
	ft.finish()
	close(stop)
	if len(ft.errs) != 1 || !strings.Contains(ft.errs[0], "left goroutines behind") {
		t.Errorf("a goroutine left running: Check reported %q, want one leak", ft.errs)
	}
}

func TestCheckPassesWhenEverythingStopped(t *testing.T) {
	Check(t)
	ft := &fakeT{TB: t}
	Check(ft)
	done := make(chan struct{})
	go func() { close(done) }()
	<-done
	ft.finish()
	if len(ft.errs) != 0 {
		t.Errorf("nothing left running: Check reported %q", ft.errs)
	}
}

func parkedForCount(stop <-chan struct{}) { <-stop }

func TestCountFindsAGoroutineByItsStack(t *testing.T) {
	Check(t)
	const fn = "leakcheck.parkedForCount"
	if got := Count(fn); got != 0 {
		t.Fatalf("Count(%q) before starting = %d, want 0", fn, got)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		parkedForCount(stop)
	}()
	for Count(fn) != 1 {
		runtime.Gosched() // the goroutine has yet to reach its park
	}
	if got := Count(fn, "no such frame"); got != 0 {
		t.Errorf("Count with a part no stack has = %d, want 0", got)
	}
	close(stop)
	<-done
	if got := Count(fn); got != 0 {
		t.Errorf("Count(%q) after it ended = %d, want 0", fn, got)
	}
}
