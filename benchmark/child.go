package benchmark

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"time"

	"github.com/adstap/adstap/internal/gctune"
)

// The middle of paths 2–5 runs in a process of its own, so that its CPU time
// and resident memory are its own and not the load generator's. The harness
// starts it as `adstap-bench serve-tap --mode=shipped|lean|traced|off`,
// `adstap-bench serve-relay` or `adstap-bench serve-typed`, with --upstream; the child prints
// "ready ADDR" and then answers one command per line on stdin with one JSON
// Usage line on stdout:
//
//	begin   reset the peak RSS (and start the CPU profile, with --cpuprofile)
//	end     (stop the CPU profile and write the heap profile, with --memprofile)
//	sample          nothing else
//	sample-gc       collect garbage and return freed memory to the OS first
//	sample-collect  collect garbage first, as a binary can be made to
//
// End of input stops the middle and the process.

// ServeChild is the child's main: args are the flags after the subcommand.
func ServeChild(subcommand string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(subcommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "shipped", "serve-tap: `shipped` (adstap run's defaults), lean (every optional output off), traced (shipped, with tracing) or off (no observer)")
	up := fs.String("upstream", "", "upstream `host:port`")
	listen := fs.String("listen", "127.0.0.1:0", "`host:port` to accept clients on")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured window to `file`")
	memProfile := fs.String("memprofile", "", "write a heap profile and a goroutine profile (FILE.goroutines) at the window's end to `file`")
	memRate := fs.Int("memprofilerate", 0, "sample one allocation per `bytes` in the heap profile (runtime.MemProfileRate; 0: Go's default, 512 KiB)")
	execTrace := fs.String("trace", "", "write an execution trace of the measured window to `file`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var p Path
	switch {
	case subcommand == "serve-typed":
		p = Typed
	case subcommand == "serve-relay":
		p = Relay
	case subcommand == "serve-tap" && tapModes[*mode] != "":
		p = tapModes[*mode]
	default:
		fmt.Fprintf(stderr, "%s: want serve-tap --mode=shipped|lean|traced|off, serve-relay or serve-typed\n", subcommand)
		return 2
	}
	if *up == "" {
		fmt.Fprintf(stderr, "%s: --upstream is required\n", subcommand)
		return 2
	}
	if *memRate > 0 {
		runtime.MemProfileRate = *memRate
	}
	if p != Typed && p != Relay {
		// As `adstap run` does; the relays keep Go's defaults, as
		// istio-agent does.
		defer gctune.Start(gctune.Apply(os.Getenv, gctune.SystemCgroup()), time.Second, slog.New(slog.DiscardHandler))()
	}
	srv, err := serve(p, *up, *listen)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", subcommand, err)
		return 1
	}
	out := bufio.NewWriter(stdout)
	fmt.Fprintf(out, "ready %s\n", srv.Addr())
	out.Flush()
	var profile, tracing *os.File
	in := bufio.NewScanner(stdin)
	code := 0
	for in.Scan() {
		cmd := strings.TrimSpace(in.Text())
		switch cmd {
		case "begin":
			if err := resetPeakRSS(); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", subcommand, err)
			}
			if *execTrace != "" && tracing == nil {
				if tracing, err = os.Create(*execTrace); err == nil {
					err = trace.Start(tracing)
				}
				if err != nil {
					fmt.Fprintf(stderr, "%s: execution trace: %v\n", subcommand, err)
				}
			}
			if *cpuProfile != "" && profile == nil {
				if profile, err = os.Create(*cpuProfile); err == nil {
					err = pprof.StartCPUProfile(profile)
				}
				if err != nil {
					fmt.Fprintf(stderr, "%s: cpu profile: %v\n", subcommand, err)
				}
			}
		case "end":
			if tracing != nil {
				trace.Stop()
				tracing.Close()
				tracing = nil
			}
			if profile != nil {
				pprof.StopCPUProfile()
				profile.Close()
				profile = nil
			}
			if *memProfile != "" {
				if err := writeHeapProfile(*memProfile); err != nil {
					fmt.Fprintf(stderr, "%s: heap profile: %v\n", subcommand, err)
				}
			}
		case "sample":
		case "sample-gc":
			runtime.GC()
			debug.FreeOSMemory()
		case "sample-collect":
			runtime.GC()
		default:
			fmt.Fprintf(stderr, "%s: unknown command %q\n", subcommand, cmd)
			continue
		}
		u, err := selfUsage()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", subcommand, err)
			code = 1
		}
		c := srv.counts()
		u.Spans, u.LogBytes, u.RefsStopped = c.Spans, c.LogBytes, c.RefsStopped
		if cmd == "end" {
			// After the usage, so that reading the metrics is not in the window.
			if err := srv.losses(&u); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", subcommand, err)
			}
		}
		b, _ := json.Marshal(u)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	if profile != nil {
		pprof.StopCPUProfile()
		profile.Close()
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", subcommand, err)
		code = 1
	}
	return code
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	g, err := os.Create(strings.TrimSuffix(path, ".heap.pprof") + ".goroutines")
	if err != nil {
		return err
	}
	if err := pprof.Lookup("goroutine").WriteTo(g, 1); err != nil {
		g.Close()
		return err
	}
	return g.Close()
}

// tapModes are serve-tap's --mode values.
var tapModes = map[string]Path{"shipped": Tap, "lean": TapLean, "traced": TapTraced, "off": TapOff}

// ChildConfig says how the harness starts middle processes.
type ChildConfig struct {
	// Command is the program and the arguments that come before the
	// subcommand: the harness's own executable.
	Command []string
	// Env is the child's environment (nil: the harness's).
	Env []string
	// ProfileDir, when set, gets a CPU and a heap profile of each
	// measured window, named after Label, and a list of the goroutines.
	ProfileDir string
	// MemProfileRate, when set, is the middle's runtime.MemProfileRate.
	MemProfileRate int
	// TraceDir, when set, gets an execution trace of each measured window.
	TraceDir string
	// Adstap is the adstap binary the sidecar paths run.
	Adstap string
	// Binaries are the adstap binaries of the Head and Base paths, run
	// with their default flags and --pprof, through which each is made to
	// collect before a window (a heap profile with gc=1); with them, every
	// middle collects as a binary can, without returning freed memory to
	// the OS (collectOnly). Were one of them without --pprof, no middle
	// would be made to collect (noForcedGC).
	Binaries map[Path]string
	Stderr   io.Writer
}

// Child starts path's middle as a process of its own for every run; label
// names its profiles (e.g. "W1-tap-full-1").
func Child(cfg ChildConfig, p Path, label func() string) StartMiddle {
	switch p {
	case Direct:
		return startDirect
	case Sidecar, SidecarNoCapture:
		return func(up string) (Middle, error) { return startSidecar(cfg.Adstap, up, p == Sidecar) }
	case Head, Base:
		return func(up string) (Middle, error) {
			return startBinary(cfg.Binaries[p], up, binariesCollect(cfg.Binaries))
		}
	}
	return func(up string) (Middle, error) {
		args := append([]string(nil), cfg.Command[1:]...)
		switch p {
		case TapOff, Tap, TapLean, TapTraced:
			for mode, mp := range tapModes {
				if mp == p {
					args = append(args, "serve-tap", "--mode="+mode)
				}
			}
		case Relay:
			args = append(args, "serve-relay")
		case Typed:
			args = append(args, "serve-typed")
		}
		args = append(args, "--upstream="+up)
		if cfg.ProfileDir != "" {
			base := cfg.ProfileDir + "/" + label()
			args = append(args, "--cpuprofile="+base+".cpu.pprof", "--memprofile="+base+".heap.pprof")
		}
		if cfg.MemProfileRate > 0 {
			args = append(args, fmt.Sprintf("--memprofilerate=%d", cfg.MemProfileRate))
		}
		if cfg.TraceDir != "" {
			args = append(args, "--trace="+cfg.TraceDir+"/"+label()+".trace")
		}
		m, err := startChild(cfg, args)
		switch {
		case err != nil:
			return nil, err
		case len(cfg.Binaries) > 0 && binariesCollect(cfg.Binaries):
			return collectOnly{m}, nil
		case len(cfg.Binaries) > 0:
			return noForcedGC{m}, nil
		}
		return m, nil
	}
}

type childMiddle struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	addr   string
	mu     sync.Mutex
	start  Usage
	closed bool
}

func startChild(cfg ChildConfig, args []string) (*childMiddle, error) {
	cmd := exec.Command(cfg.Command[0], args...)
	cmd.Env = cfg.Env
	cmd.Stderr = cfg.Stderr
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &childMiddle{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := c.readLine(30 * time.Second)
	addr, ok := strings.CutPrefix(line, "ready ")
	if err != nil || !ok {
		c.Close()
		return nil, fmt.Errorf("middle %s did not start: %q %v", strings.Join(args, " "), line, err)
	}
	c.addr = addr
	return c, nil
}

// readLine reads one line from the child, or fails after d.
func (c *childMiddle) readLine(d time.Duration) (string, error) {
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := c.out.ReadString('\n')
		ch <- result{strings.TrimSpace(l), err}
	}()
	select {
	case r := <-ch:
		return r.line, r.err
	case <-time.After(d):
		c.cmd.Process.Kill()
		r := <-ch
		return r.line, fmt.Errorf("no answer from the middle within %v", d)
	}
}

func (c *childMiddle) command(cmd string) (Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Usage{}, errors.New("middle closed")
	}
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		return Usage{}, err
	}
	line, err := c.readLine(time.Minute)
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	if err := json.Unmarshal([]byte(line), &u); err != nil {
		return Usage{}, fmt.Errorf("middle answered %q: %v", line, err)
	}
	return u, nil
}

func (c *childMiddle) Addr() string { return c.addr }

func (c *childMiddle) Begin() error {
	if _, err := waitIdle(c.cmd.Process.Pid); err != nil {
		return err
	}
	u, err := c.command("begin")
	c.start = u
	return err
}

func (c *childMiddle) End() (Window, error) {
	u, err := c.command("end")
	return window(c.start, u), err
}

func (c *childMiddle) Sample() (Usage, error) { return c.command("sample") }

func (c *childMiddle) SampleAfterGC() (Usage, error) { return c.command("sample-gc") }

// collectOnly is a child whose SampleAfterGC collects its garbage but keeps
// the freed memory, as a binary made to collect from outside does.
type collectOnly struct{ *childMiddle }

func (m collectOnly) SampleAfterGC() (Usage, error) { return m.command("sample-collect") }

// Close ends the child's input, which stops it, and waits for it to exit.
func (c *childMiddle) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-done
		return errors.New("middle did not stop within 30s; killed")
	}
}
