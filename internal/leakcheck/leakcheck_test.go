package leakcheck

import (
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
