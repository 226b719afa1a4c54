package tap

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// clientPreface is what every plaintext HTTP/2 client sends first.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

var discardLog = slog.New(slog.DiscardHandler)

// wrappingListener hands out TCP connections under a type of its own, as a
// listener from another package might.
type wrappingListener struct{ net.Listener }

type otherConn struct{ net.Conn }

func (l wrappingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return otherConn{c}, nil
}

// needPeek skips tests of what only peeking does.
func needPeek(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("peeking is written for Linux only; elsewhere connections are wrapped")
	}
}

func listenTCP(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func listenUnix(t *testing.T) net.Listener {
	t.Helper()
	// A short directory: socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "guard")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func dialTo(t *testing.T, lis net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial(lis.Addr().Network(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// acceptWithin runs Accept, failing the test if it takes longer than d.
func acceptWithin(t *testing.T, l *guardedListener, d time.Duration) net.Conn {
	t.Helper()
	type result struct {
		c   net.Conn
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		got <- result{c, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Accept: %v", r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(d):
		l.Close() // ends the Accept above
		t.Fatalf("Accept did not return within %v", d)
		return nil
	}
}

func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading what the client sent: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	return string(b)
}

func TestGuardHandsGRPCTheConnItself(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name     string
		listen   func(*testing.T) net.Listener
		peeked   bool
		wantType string
	}{
		{name: "tcp", listen: listenTCP, peeked: true, wantType: "*net.TCPConn"},
		{name: "unix", listen: listenUnix, peeked: true, wantType: "*net.UnixConn"},
		{
			name:     "any other conn is wrapped",
			listen:   func(t *testing.T) net.Listener { return wrappingListener{listenTCP(t)} },
			wantType: "*tap.guardedConn",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.peeked {
				needPeek(t)
			}
			l := newGuardedListener(tc.listen(t), false, discardLog, time.Minute, DefaultMaxPendingConnections, new(limits))
			defer l.Close()
			client := dialTo(t, l)
			io.WriteString(client, clientPreface)

			c := acceptWithin(t, l, 5*time.Second)
			if got := fmt.Sprintf("%T", c); got != tc.wantType {
				t.Errorf("Accept returned a %s, want %s", got, tc.wantType)
			}
			if diff := cmp.Diff(clientPreface, readN(t, c, len(clientPreface))); diff != "" {
				t.Errorf("bytes gRPC reads (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGuardJudgesFirstBytesThatArriveInPieces(t *testing.T) {
	leakcheck.Check(t)
	needPeek(t)
	tests := []struct {
		name      string
		tls       bool
		pieces    []string
		wantRead  string // what gRPC reads from the accepted conn; "" if refused
		wantReply string // what a refused client reads back
	}{{
		name:     "HTTP/2 preface one byte first",
		pieces:   []string{"P", clientPreface[1:]},
		wantRead: clientPreface,
	}, {
		name:     "HTTP/2 preface a byte at a time",
		pieces:   strings.Split(clientPreface[:9], ""),
		wantRead: clientPreface[:9],
	}, {
		name:      "HTTP/1 method in two pieces",
		pieces:    []string{"PO", "ST /x HTTP/1.1\r\nHost: tap\r\n\r\n"},
		wantReply: "HTTP/1.1 426 Upgrade Required",
	}, {
		name:      "longest HTTP/1 method in two pieces",
		pieces:    []string{"OPTIO", "NS * HTTP/1.1\r\nHost: tap\r\n\r\n"},
		wantReply: "HTTP/1.1 426 Upgrade Required",
	}, {
		name:      "HTTP/1 on TLS in two pieces",
		tls:       true,
		pieces:    []string{"G", "ET / HTTP/1.1\r\nHost: tap\r\n\r\n"},
		wantReply: "HTTP/1.1 400 Bad Request",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lis := listenTCP(t)
			peeks := make(chan [2]int, 64) // bytes seen, judged (1) or not (0)
			l := newGuardedListener(lis, tc.tls, discardLog, time.Minute, DefaultMaxPendingConnections, new(limits), func(l *guardedListener) {
				l.peeked = func(n int, judged bool) {
					j := 0
					if judged {
						j = 1
					}
					peeks <- [2]int{n, j}
				}
			})
			defer l.Close()
			client := dialTo(t, l)
			wrote := make(chan struct{})
			go func() {
				// Each piece reaches the guard alone: the next is sent once
				// the guard has looked at the bytes so far and wanted more.
				defer close(wrote)
				total, judged := 0, false
				for i, p := range tc.pieces {
					io.WriteString(client, p)
					total += len(p)
					for !judged && i < len(tc.pieces)-1 {
						pk := <-peeks
						judged = pk[1] == 1 // the rest goes straight on
						if pk[0] >= total {
							break
						}
					}
				}
			}()
			defer func() { <-wrote }()
			if tc.wantRead == "" {
				client.SetReadDeadline(time.Now().Add(5 * time.Second))
				reply, _ := io.ReadAll(client)
				if !strings.HasPrefix(string(reply), tc.wantReply) {
					t.Errorf("client read %q, want it to start with %q", reply, tc.wantReply)
				}
				return
			}
			c := acceptWithin(t, l, 5*time.Second)
			if diff := cmp.Diff(tc.wantRead, readN(t, c, len(tc.wantRead))); diff != "" {
				t.Errorf("bytes gRPC reads (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGuardPassesASilentClientOnAfterTheBound(t *testing.T) {
	leakcheck.Check(t)
	needPeek(t)
	l := newGuardedListener(listenTCP(t), false, discardLog, 100*time.Millisecond, DefaultMaxPendingConnections, new(limits))
	defer l.Close()
	client := dialTo(t, l)

	c := acceptWithin(t, l, 5*time.Second)
	if got, want := fmt.Sprintf("%T", c), "*net.TCPConn"; got != want {
		t.Errorf("Accept returned a %s, want %s", got, want)
	}
	// Well past the peek's deadline, which must not have been left behind.
	time.Sleep(300 * time.Millisecond)
	io.WriteString(client, clientPreface)
	buf := make([]byte, len(clientPreface))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("reading from the conn after the peek timed out: %v", err)
	}
	if diff := cmp.Diff(clientPreface, string(buf)); diff != "" {
		t.Errorf("bytes gRPC reads (-want +got):\n%s", diff)
	}
}

func TestGuardCloseWithASilentClientLeavesNoGoroutine(t *testing.T) {
	leakcheck.Check(t)
	needPeek(t)
	before := goleak.IgnoreCurrent()
	l := newGuardedListener(listenTCP(t), false, discardLog, time.Hour, DefaultMaxPendingConnections, new(limits))
	dialTo(t, l) // sends nothing

	deadline := time.Now().Add(5 * time.Second)
	for l.pending() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the silent client was never accepted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	goleak.VerifyNone(t, before)
}

func (l *guardedListener) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.checking)
}

func TestDiagnose(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		first       string
		tls         bool
		wantDecided bool
		wantProblem string // a part of it; "" for none
		wantReply   string // a part of it
	}{
		{first: "", wantDecided: false},
		{first: "P", wantDecided: false},
		{first: "PR", wantDecided: true},
		{first: "PRI * HT", wantDecided: true},
		{first: "PRI * HT", tls: true, wantDecided: true, wantProblem: "plaintext HTTP/2 on a TLS listener"},
		{first: "OPTIONS", wantDecided: false},
		{first: "OPTIONS ", wantDecided: true, wantProblem: "HTTP/1.x request on a gRPC listener", wantReply: "426"},
		{first: "GET /x H", tls: true, wantDecided: true, wantProblem: "plaintext HTTP/1.x request on a TLS listener", wantReply: "400"},
		{first: "\x16\x03\x01\x02", wantDecided: true, wantProblem: "TLS handshake on a plaintext listener"},
		{first: "\x16\x03\x01\x02", tls: true, wantDecided: true},
		{first: "GETX", wantDecided: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q tls=%v", tc.first, tc.tls), func(t *testing.T) {
			if got := decided([]byte(tc.first)); got != tc.wantDecided {
				t.Errorf("decided = %v, want %v", got, tc.wantDecided)
			}
			reply, problem := diagnose([]byte(tc.first), tc.tls)
			if (tc.wantProblem == "") != (problem == "") || !strings.Contains(problem, tc.wantProblem) {
				t.Errorf("problem = %q, want %q", problem, tc.wantProblem)
			}
			if !strings.Contains(reply, tc.wantReply) || (tc.wantReply == "") != (reply == "") {
				t.Errorf("reply = %q, want it to contain %q", reply, tc.wantReply)
			}
		})
	}
}
