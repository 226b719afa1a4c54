package benchmark

import (
	"os"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestProcessUsageReadsCPU: another process's CPU is read from /proc in
// clock ticks, so a middle that did little in a tiny run may read 0
// (TestBinaryPaths accepts it); a process that burned a tenth of a second
// must read more than nothing, and no more than it used in all.
func TestProcessUsageReadsCPU(t *testing.T) {
	leakcheck.Check(t)
	before, err := selfUsage()
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for self, _ := selfUsage(); self.CPU-before.CPU < 100*time.Millisecond; self, _ = selfUsage() {
		for i := range 1 << 16 {
			x += i
		}
	}
	u, err := processUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self, _ := selfUsage()
	if u.CPU <= 0 || u.CPU > self.CPU+2*time.Second/userHZ {
		t.Errorf("processUsage(self).CPU = %v, want more than 0 and at most getrusage's %v (%d)", u.CPU, self.CPU, x%2)
	}
	if u.RSS <= 0 || u.PeakRSS <= 0 || u.FDs <= 0 {
		t.Errorf("processUsage(self) = %+v: memory or files not read", u)
	}
	// Page faults as the binaries' comparison prints them: /proc's count
	// is getrusage's, read a moment apart.
	if self.MinorFaults <= 0 || u.MinorFaults <= 0 || u.MinorFaults > self.MinorFaults {
		t.Errorf("processUsage(self).MinorFaults = %d, want more than 0 and at most getrusage's %d", u.MinorFaults, self.MinorFaults)
	}
}

// TestUsageCountsSyscallsAndSwitches: both ways of reading a process count
// the read and write system calls it makes (a hundred writes to a pipe and
// their reads show), and the context switches of its threads.
func TestUsageCountsSyscallsAndSwitches(t *testing.T) {
	leakcheck.Check(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	self0, err := selfUsage()
	if err != nil {
		t.Fatal(err)
	}
	proc0, err := processUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	const calls = 100
	b := make([]byte, 1)
	for range calls {
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(b); err != nil {
			t.Fatal(err)
		}
	}
	self1, _ := selfUsage()
	proc1, _ := processUsage(os.Getpid())
	for _, c := range []struct {
		how         string
		before, now Usage
	}{{"selfUsage", self0, self1}, {"processUsage", proc0, proc1}} {
		if got := c.now.Syscalls - c.before.Syscalls; got < 2*calls {
			t.Errorf("%s: %d read and write syscalls counted across %d writes and reads, want at least that many", c.how, got, 2*calls)
		}
		if c.now.ContextSwitches <= 0 {
			t.Errorf("%s: %d context switches, want the threads' count", c.how, c.now.ContextSwitches)
		}
	}
}
