package benchmark

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// binaryMiddle is an adstap binary run with its default flags: only where
// it listens, its upstream and its admin address are given, its log goes
// to a pipe the harness reads and drops (counting the streams whose
// references it stopped checking), and no ADSTAP_* or OTEL_* variable
// reaches it. Its usage is read from /proc, from outside, as W7's
// sidecar's is.
type binaryMiddle struct {
	cmd         *exec.Cmd
	listen      string
	admin       string
	exited      chan error
	refsStopped atomic.Int64
	start       Usage
	// collect: the binary serves Go's profiler, through which
	// SampleAfterGC makes it collect.
	collect bool
}

// startBinary runs `bin run` in front of upstream, with --pprof when
// collect. Older binaries cannot say which port :0 gave them, so the ports
// are picked free up front.
func startBinary(bin, upstream string, collect bool) (Middle, error) {
	if bin == "" {
		return nil, errors.New("no adstap binary to run")
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	m := &binaryMiddle{listen: ports[0], admin: ports[1], exited: make(chan error, 1), collect: collect}
	args := []string{"run", "--upstream=" + upstream, "--listen=" + m.listen, "--admin=" + m.admin}
	if collect {
		// Handlers on the admin server, nothing on the relay's path.
		args = append(args, "--pprof")
	}
	m.cmd = exec.Command(bin, args...)
	m.cmd.Env = defaultEnv(os.Environ())
	m.cmd.SysProcAttr = childProcAttr()
	stderr, err := m.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	var tail tailBuffer
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		r := bufio.NewReader(stderr)
		for {
			line, err := r.ReadBytes('\n')
			if bytes.Contains(line, refsStoppedLine) {
				m.refsStopped.Add(1)
			}
			tail.add(line)
			if err != nil {
				break
			}
		}
		m.exited <- m.cmd.Wait()
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + m.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m, nil
			}
		}
		select {
		case err := <-m.exited:
			m.exited <- err
			return nil, fmt.Errorf("%s run exited before it was ready: %v\n%s", bin, err, tail.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.Close()
			return nil, fmt.Errorf("%s run was not ready within a minute:\n%s", bin, tail.String())
		}
	}
}

// defaultEnv is env without the variables that would change a binary's
// defaults: its flags' twins and tracing's.
func defaultEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "ADSTAP_") || strings.HasPrefix(kv, "OTEL_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// freePorts are n loopback host:ports free a moment ago.
func freePorts(n int) ([]string, error) {
	var out []string
	var liss []net.Listener
	defer func() {
		for _, l := range liss {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		liss = append(liss, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}

func (m *binaryMiddle) Addr() string { return m.listen }

func (m *binaryMiddle) Begin() error {
	if _, err := waitIdle(m.cmd.Process.Pid); err != nil {
		return err
	}
	if err := resetPeakRSSOf(m.cmd.Process.Pid); err != nil {
		return err
	}
	u, err := m.Sample()
	if err == nil {
		// Its collections and allocation so far, for the window's.
		err = scrapeLosses(m.admin, &u)
	}
	m.start = u
	return err
}

// End reads the binary's usage, then what it counted of its losses.
func (m *binaryMiddle) End() (Window, error) {
	u, err := m.Sample()
	if err != nil {
		return Window{}, err
	}
	err = scrapeLosses(m.admin, &u)
	u.RefsStopped = m.refsStopped.Load()
	return window(m.start, u), err
}

func (m *binaryMiddle) Sample() (Usage, error) { return processUsage(m.cmd.Process.Pid) }

// SampleAfterGC makes the binary collect, when it serves Go's profiler (a
// heap profile asked with gc=1 collects first), and reads its usage; the
// freed memory is not returned to the OS, as it cannot be from outside.
func (m *binaryMiddle) SampleAfterGC() (Usage, error) {
	if m.collect {
		resp, err := http.Get("http://" + m.admin + "/debug/pprof/heap?gc=1")
		if err != nil {
			return Usage{}, fmt.Errorf("making adstap collect: %w", err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s", resp.Status)
		}
		if err != nil {
			return Usage{}, fmt.Errorf("making adstap collect: /debug/pprof/heap: %w", err)
		}
	}
	return m.Sample()
}

// binariesCollect reports whether every binary has --pprof, so that each
// can be made to collect before a window (binaryMiddle.SampleAfterGC).
func binariesCollect(bins map[Path]string) bool {
	if len(bins) == 0 {
		return false
	}
	for _, bin := range bins {
		if !hasPprofFlag(bin) {
			return false
		}
	}
	return true
}

// hasPprofFlag reports whether `bin run -h` lists --pprof.
func hasPprofFlag(bin string) bool {
	pprofFlags.Lock()
	defer pprofFlags.Unlock()
	if has, ok := pprofFlags.of[bin]; ok {
		return has
	}
	out, _ := exec.Command(bin, "run", "-h").CombinedOutput()
	has := bytes.Contains(out, []byte("--pprof\n"))
	if pprofFlags.of == nil {
		pprofFlags.of = map[string]bool{}
	}
	pprofFlags.of[bin] = has
	return has
}

var pprofFlags struct {
	sync.Mutex
	of map[string]bool
}

// Close sends SIGTERM and waits for the binary to drain and exit; past its
// drain (10 s by default) and a margin it is killed.
func (m *binaryMiddle) Close() error {
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.exited:
		m.exited <- err
		return err
	case <-time.After(30 * time.Second):
		m.cmd.Process.Kill()
		err := <-m.exited
		m.exited <- err
		return errors.New("adstap run did not exit within 30s of SIGTERM; killed")
	}
}

// noForcedGC is a middle whose SampleAfterGC does not collect: in a
// comparison with a binary that cannot be made to collect from outside (no
// --pprof), every middle starts its windows from wherever its collector is.
type noForcedGC struct{ Middle }

func (m noForcedGC) SampleAfterGC() (Usage, error) { return m.Sample() }

// scrapeLosses reads a tap's losses from its admin server's /metrics:
// adstap_nack_not_kept_total, which every tap has (its absence is an
// error, not a 0), and adstap_output_dropped_total{output="references"},
// which a tap without the reference check does not (0); and Go's count of
// its collections and of the bytes it allocated, which W2's lines show.
func scrapeLosses(admin string, u *Usage) error {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return fmt.Errorf("reading the tap's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reading the tap's metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	found := false
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var into *int64
		switch name {
		case "adstap_nack_not_kept_total":
			into, found = &u.NACKNotKept, true
		case `adstap_output_dropped_total{output="references"}`:
			into = &u.RefsDropped
		case "go_gc_duration_seconds_count":
			into = &u.GCs
		case "go_memstats_alloc_bytes_total":
			into = &u.Allocated
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return fmt.Errorf("reading the tap's metrics: %s: %v", name, err)
		}
		*into = int64(v)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !found {
		return errors.New("the tap's metrics have no adstap_nack_not_kept_total")
	}
	return nil
}

// tailBuffer keeps the last lines of a child's log, for its errors.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(line []byte) {
	if len(line) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, string(line))
	if len(t.lines) > 40 {
		t.lines = append(t.lines[:0], t.lines[len(t.lines)-20:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "")
}
