package sidecar

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/adstap/adstap/internal/testutil/syncbuf"
)

// Process is an adstap binary running as the template's container does.
type Process struct {
	Cmd *exec.Cmd
	// Listen is where it accepts xDS clients (host:port, or a Unix socket's
	// path), and Admin its admin server's host:port, as it logged them.
	Listen, Admin string
	// Log is its standard error: the JSON log the template asks for.
	Log    *syncbuf.Buffer
	exited chan error
}

// Start runs bin with "run", args and env (the result of
// Container.CommandLine), and returns once it logged that it relays, or
// fails within a minute. The caller stops it (Stop).
func Start(bin string, args, env []string) (*Process, error) {
	cmd := exec.Command(bin, append([]string{"run"}, args...)...)
	cmd.Env = env
	cmd.SysProcAttr = sysProcAttr()
	p := &Process{Cmd: cmd, Log: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	relaying := make(chan struct{ listen, admin string }, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.Log.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, Listen, Admin string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "adstap relaying" {
				relaying <- struct{ listen, admin string }{line.Listen, strings.TrimPrefix(line.Admin, "http://")}
			}
		}
		io.Copy(p.Log, stderr)
		p.exited <- cmd.Wait()
	}()
	select {
	case r := <-relaying:
		p.Listen, p.Admin = strings.TrimPrefix(r.listen, "unix://"), r.admin
		return p, nil
	case err := <-p.exited:
		p.exited <- err
		return nil, fmt.Errorf("adstap run exited before relaying: %v\n%s", err, p.Log.String())
	case <-time.After(time.Minute):
		p.Cmd.Process.Kill()
		<-p.exited
		return nil, fmt.Errorf("adstap run did not say it relays within a minute:\n%s", p.Log.String())
	}
}

// Stop sends SIGTERM, as the kubelet does, and waits for the process to
// exit; past its drain (10 s by default) and a margin it is killed.
func (p *Process) Stop() error {
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(30 * time.Second):
		p.Cmd.Process.Kill()
		err := <-p.exited
		p.exited <- err
		return errors.New("adstap run did not exit within 30s of SIGTERM; killed")
	}
}

// Memory is a process's resident memory, from /proc/PID/status.
type Memory struct {
	RSS  int64 // bytes resident now (VmRSS)
	Peak int64 // bytes, the high-water mark of RSS (VmHWM)
}

// MemoryOf reads the resident memory of process pid; Linux only.
func MemoryOf(pid int) (Memory, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return Memory{}, err
	}
	var m Memory
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			m.RSS = StatusKB(line)
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			m.Peak = StatusKB(line)
		}
	}
	if m.RSS == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// StatusKB parses a /proc status line such as "VmRSS:	  12345 kB" into bytes.
func StatusKB(line []byte) int64 {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return n << 10
}

// Memory reads the process's resident memory.
func (p *Process) Memory() (Memory, error) { return MemoryOf(p.Cmd.Process.Pid) }
