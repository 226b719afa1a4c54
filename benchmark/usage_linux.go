package benchmark

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"syscall"
	"time"

	"github.com/adstap/adstap/internal/testutil/sidecar"
)

// selfUsage reads this process's usage: CPU from getrusage (microseconds),
// memory from /proc/self/status.
func selfUsage() (Usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, err
	}
	u := Usage{
		CPU:         time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		Goroutines:  runtime.NumGoroutine(),
		MinorFaults: ru.Minflt,
		// Every thread's, the finished ones' too.
		ContextSwitches: ru.Nvcsw + ru.Nivcsw,
		Syscalls:        syscallsOf("/proc/self"),
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		u.FDs = len(fds)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return u, err
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			u.RSS = sidecar.StatusKB(line)
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			u.PeakRSS = sidecar.StatusKB(line)
		}
	}
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		u.HeapInuse = int64(s[0].Value.Uint64())
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		u.Stacks = int64(s[1].Value.Uint64())
	}
	if s[2].Value.Kind() == metrics.KindUint64 {
		u.GCs = int64(s[2].Value.Uint64())
	}
	if s[3].Value.Kind() == metrics.KindFloat64 {
		u.GCCPU = time.Duration(s[3].Value.Float64() * float64(time.Second))
	}
	if s[4].Value.Kind() == metrics.KindUint64 {
		u.Allocated = int64(s[4].Value.Uint64())
	}
	if s[5].Value.Kind() == metrics.KindUint64 {
		u.LiveHeap = int64(s[5].Value.Uint64())
	}
	return u, nil
}

// resetPeakRSS sets this process's resident high-water mark (VmHWM) back to
// its current resident size, so the next peak is the peak of what follows.
func resetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// userHZ is the unit of /proc/stat's CPU times (sysconf(_SC_CLK_TCK), 100 on Linux).
const userHZ = 100

// machineCPU is the CPU time every process on the machine has used since
// boot (user, nice, system and steal from /proc/stat), and the
// load generator's own (this process's, from getrusage).
func machineCPU() (all, self time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0, 0, errors.New("bench: unexpected /proc/stat")
	}
	var ticks int64
	for i, v := range f[1:9] {
		// Skip idle and iowait; skip irq and softirq too, which loopback
		// traffic of the load generator and the middle is partly counted as.
		if i == 3 || i == 4 || i == 5 || i == 6 {
			continue
		}
		n, _ := strconv.ParseInt(string(v), 10, 64)
		ticks += n
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, err
	}
	return time.Duration(ticks) * time.Second / userHZ, time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// RaiseFileLimit raises this process's limit on open files as far as it
// can: to the hard limit, and past it (up to the kernel's nr_open) when the
// process may. Every stream through a middle costs two descriptors in the
// middle and two in the load generator.
func RaiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err == nil && n > l.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
				return
			}
		}
	}
	l.Cur = l.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
}

// FileLimit is this process's limit on open files (the soft limit, which
// RaiseFileLimit raises as far as it may).
func FileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// processUsage reads another process's usage: CPU from /proc/PID/stat
// (clock ticks), memory from /proc/PID/status, its open files.
func processUsage(pid int) (Usage, error) {
	proc := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return Usage{}, err
	}
	// The command name, in parentheses, may hold spaces: the fields after
	// it start with the state (field 3); minflt is 10, utime and stime are
	// 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if i < 0 || len(f) < 13 {
		return Usage{}, errors.New("bench: unexpected " + proc + "/stat")
	}
	minflt, _ := strconv.ParseInt(string(f[7]), 10, 64)
	utime, _ := strconv.ParseInt(string(f[11]), 10, 64)
	stime, _ := strconv.ParseInt(string(f[12]), 10, 64)
	u := Usage{CPU: time.Duration(utime+stime) * time.Second / userHZ, MinorFaults: minflt,
		Syscalls: syscallsOf(proc), ContextSwitches: contextSwitchesOf(proc)}
	m, err := sidecar.MemoryOf(pid)
	if err != nil {
		return u, err
	}
	u.RSS, u.PeakRSS = m.RSS, m.Peak
	if fds, err := os.ReadDir(proc + "/fd"); err == nil {
		u.FDs = len(fds)
	}
	return u, nil
}

// resetPeakRSSOf is ResetPeakRSS for another process.
func resetPeakRSSOf(pid int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}

// childProcAttr has a binary the harness runs killed when the harness dies
// without stopping it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// syscallsOf is the read and write system calls of the process at proc
// (/proc/PID), 0 when /proc/PID/io cannot be read.
func syscallsOf(proc string) int64 {
	b, err := os.ReadFile(proc + "/io")
	if err != nil {
		return 0
	}
	return sumOf(b, "syscr:", "syscw:")
}

// contextSwitchesOf is the context switches of the threads the process at
// proc runs now (those that ended are not counted), 0 when unreadable.
func contextSwitchesOf(proc string) int64 {
	tasks, err := os.ReadDir(proc + "/task")
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range tasks {
		if b, err := os.ReadFile(proc + "/task/" + t.Name() + "/status"); err == nil {
			n += sumOf(b, "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
		}
	}
	return n
}

// sumOf adds the values of the "key: value" lines of b whose key is one of keys.
func sumOf(b []byte, keys ...string) int64 {
	var n int64
	for line := range bytes.Lines(b) {
		for _, key := range keys {
			if v, ok := bytes.CutPrefix(line, []byte(key)); ok {
				c, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
				n += c
			}
		}
	}
	return n
}
