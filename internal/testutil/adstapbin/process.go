package adstapbin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/syncbuf"
)

// Process is an adstap binary started by Start, with the addresses it
// logged when it began relaying.
type Process struct {
	// Listen is the xDS listener; Admin and Metrics are host:port ("" when
	// not served).
	Listen, Admin, Metrics string
	// Log is everything it wrote to stderr so far.
	Log *syncbuf.Buffer
}

// Start runs bin with args, which must have it log JSON (--log-format=json,
// or the template's environment), and env (nil: this process's), and returns once it logs "adstap relaying". It is stopped with SIGTERM at
// t's cleanup (and killed, failing t, if it lingers). An error, with the
// log so far, when it exits or does not start within 30s; the process is
// gone then.
func Start(t testing.TB, bin string, args, env []string) (*Process, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Log: new(syncbuf.Buffer)}
	started := make(chan struct{ Listen, Admin, Metrics string }, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			p.Log.Write(append(line, '\n'))
			var rec struct{ Msg, Listen, Admin, Metrics string }
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "adstap relaying" {
				started <- struct{ Listen, Admin, Metrics string }{rec.Listen, rec.Admin, rec.Metrics}
			}
		}
		exited <- cmd.Wait()
	}()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("adstap %s did not stop within 15s of SIGTERM", strings.Join(args, " "))
		}
	}
	select {
	case a := <-started:
		t.Cleanup(stop)
		p.Listen = a.Listen
		p.Admin = strings.TrimPrefix(a.Admin, "http://")
		p.Metrics = strings.TrimSuffix(strings.TrimPrefix(a.Metrics, "http://"), "/metrics")
		return p, nil
	case err := <-exited:
		return nil, fmt.Errorf("adstap %s exited (%v):\n%s", strings.Join(args, " "), err, p.Log.String())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("adstap %s did not start within 30s:\n%s", strings.Join(args, " "), p.Log.String())
	}
}

// HostAddresses are this host's addresses beyond loopback (a pod's own IP,
// in a pod), where what a test starts must not answer but by design.
func HostAddresses(t testing.TB) []net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			out = append(out, n.IP)
		}
	}
	return out
}
