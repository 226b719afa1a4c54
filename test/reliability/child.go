package reliability

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// The child upstream is this test binary started again with these variables:
// a control plane in a process of its own, so that a test can kill it with
// SIGKILL in the middle of a push, as the OOM killer or a node failure would.
const (
	childEnv     = "ADSTAP_RELIABILITY_CHILD" // "upstream"
	childAddr    = "ADSTAP_RELIABILITY_CHILD_ADDR"
	childPush    = "ADSTAP_RELIABILITY_CHILD_PUSH_BYTES"
	childRate    = "ADSTAP_RELIABILITY_CHILD_BYTES_PER_SECOND"
	childMaxLife = 10 * time.Minute // a child whose parent vanished still ends
)

// RunChildIfAsked turns the process into the child upstream when the test
// binary was started as one, and never returns then. Call it from an init
// function of the test package, before testing parses its flags.
func RunChildIfAsked() {
	if os.Getenv(childEnv) != "upstream" {
		return
	}
	if err := runChildUpstream(); err != nil {
		fmt.Fprintln(os.Stderr, "reliability child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// pushInChild is the push a child upstream of pushBytes answers every stream
// with: a CDS DiscoveryResponse of Istio-shaped clusters, deterministically
// encoded so that parent and child agree on its bytes.
func pushInChild(pushBytes int) []byte {
	const per = 100_000
	n := max(1, pushBytes/per)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&discovery.DiscoveryResponse{
		TypeUrl: xdstest.ClusterType, VersionInfo: "child-1", Nonce: "1", Resources: xdstest.ClusterAnys(n, per),
	})
	if err != nil {
		panic(err)
	}
	return b
}

func runChildUpstream() error {
	pushBytes, _ := strconv.Atoi(os.Getenv(childPush))
	rate, _ := strconv.Atoi(os.Getenv(childRate))
	push := pushInChild(pushBytes)
	out := &lineWriter{}
	lis, err := net.Listen("tcp", os.Getenv(childAddr))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(push)
	out.printf("PUSH %d %s", len(push), hex.EncodeToString(sum[:]))
	out.printf("LISTENING %s", lis.Addr())
	var l net.Listener = lis
	if rate > 0 {
		l = throttledListener{Listener: lis, rate: rate, out: out}
	}
	srv := grpc.NewServer(
		grpc.ForceServerCodecV2(codec.Passthrough{}),
		grpc.MaxRecvMsgSize(xdstest.MaxRawMessage), grpc.MaxSendMsgSize(xdstest.MaxRawMessage),
		grpc.UnknownServiceHandler(func(_ any, s grpc.ServerStream) error {
			if _, err := xdstest.Recv(s); err != nil {
				return err
			}
			out.printf("PUSHING %d", len(push))
			if err := xdstest.Send(s, push); err != nil {
				return err
			}
			out.printf("PUSHED")
			for {
				if _, err := xdstest.Recv(s); err != nil {
					return nil
				}
			}
		}),
	)
	time.AfterFunc(childMaxLife, func() { os.Exit(3) })
	return srv.Serve(l)
}

type lineWriter struct{ mu sync.Mutex }

func (w *lineWriter) printf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// throttledListener writes at most rate bytes a second on each connection,
// so a large push is in flight long enough to be cut in the middle, and
// reports every MiB written.
type throttledListener struct {
	net.Listener
	rate int
	out  *lineWriter
}

func (l throttledListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &throttledConn{Conn: c, rate: l.rate, out: l.out}, nil
}

type throttledConn struct {
	net.Conn
	rate    int
	out     *lineWriter
	mu      sync.Mutex
	written int
}

func (c *throttledConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(p) {
		chunk := p[n:min(len(p), n+32<<10)]
		time.Sleep(time.Duration(float64(len(chunk)) / float64(c.rate) * float64(time.Second)))
		m, err := c.Conn.Write(chunk)
		n += m
		before := c.written
		c.written += m
		if c.written>>20 != before>>20 {
			c.out.printf("WROTE %d", c.written)
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ChildOptions shape a child upstream.
type ChildOptions struct {
	Addr           string // where it listens: "127.0.0.1:0", or the address of a child it replaces
	PushBytes      int    // about how large the one push of every stream is
	BytesPerSecond int    // 0: as fast as loopback goes
}

// child is a control plane in a process of its own.
type child struct {
	Addr     string
	PushSize int
	PushHash [32]byte

	cmd    *exec.Cmd
	lines  chan string
	read   chan struct{}
	exited chan struct{}
	once   sync.Once
}

// StartChild starts a child upstream and waits until it listens. It is
// killed at cleanup if the test has not killed it.
func StartChild(t testing.TB, o ChildOptions) *child {
	t.Helper()
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatalf("reliability: pipe: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		childEnv+"=upstream",
		childAddr+"="+o.Addr,
		childPush+"="+strconv.Itoa(o.PushBytes),
		childRate+"="+strconv.Itoa(o.BytesPerSecond),
	)
	cmd.Stdout = pw
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		t.Fatalf("reliability: start child upstream: %v", err)
	}
	pw.Close()
	c := &child{cmd: cmd, lines: make(chan string, 1024), read: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(c.read)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody is listening for that many lines
			}
		}
	}()
	go func() {
		cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.Kill()
		<-c.read
	})
	for {
		line, ok := c.WaitLine(30*time.Second, "PUSH ", "LISTENING ")
		if !ok {
			t.Fatalf("reliability: the child upstream did not start listening within 30s")
		}
		if rest, ok := strings.CutPrefix(line, "PUSH "); ok {
			size, hash, _ := strings.Cut(rest, " ")
			c.PushSize, _ = strconv.Atoi(size)
			h, _ := hex.DecodeString(hash)
			copy(c.PushHash[:], h)
			continue
		}
		c.Addr = strings.TrimPrefix(line, "LISTENING ")
		return c
	}
}

// WaitLine returns the next line of the child's output that starts with one
// of prefixes, skipping others, or false after d or when the child exits.
func (c *child) WaitLine(d time.Duration, prefixes ...string) (string, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case line := <-c.lines:
			for _, p := range prefixes {
				if strings.HasPrefix(line, p) {
					return line, true
				}
			}
		case <-c.read:
			return "", false
		case <-timer.C:
			return "", false
		}
	}
}

// Kill sends SIGKILL and waits for the process to be gone; it returns when
// the kill was sent.
func (c *child) Kill() time.Time {
	var at time.Time
	c.once.Do(func() {
		at = time.Now()
		c.cmd.Process.Kill()
	})
	<-c.exited
	return at
}
