package tap_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

func TestWrongProtocolClientsGetAClearAnswer(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "adstap", nil, []net.IP{net.ParseIP("127.0.0.1")}, false)
	dir := t.TempDir()
	certFile, keyFile := kp.WriteFiles(t, dir, "tap")
	tlsCfg, err := tap.ListenTLSConfig(certFile, keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&digestLog{}))

	tests := []struct {
		name      string
		listenTLS *tls.Config
		send      func(c net.Conn)
		wantReply string // in what the client reads back
		wantLog   string
	}{{
		name:      "HTTP/1.1 on plaintext",
		send:      func(c net.Conn) { io.WriteString(c, "GET /debug HTTP/1.1\r\nHost: tap\r\n\r\n") },
		wantReply: "HTTP/1.1 426 Upgrade Required",
		wantLog:   "HTTP/1.x request on a gRPC listener",
	}, {
		name:      "HTTP/1.1 on TLS",
		listenTLS: tlsCfg,
		send:      func(c net.Conn) { io.WriteString(c, "POST /x HTTP/1.1\r\nHost: tap\r\n\r\n") },
		wantReply: "HTTP/1.1 400 Bad Request",
		wantLog:   "plaintext HTTP/1.x request on a TLS listener",
	}, {
		name: "TLS on plaintext",
		send: func(c net.Conn) {
			tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake()
		},
		wantLog: "TLS handshake on a plaintext listener",
	}, {
		name:      "h2c on TLS",
		listenTLS: tlsCfg,
		send:      func(c net.Conn) { io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") },
		wantLog:   "plaintext HTTP/2 on a TLS listener",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			_, addr := startTap(t, tap.Config{Upstream: up.Addr, ListenTLS: tc.listenTLS,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
			c, err := net.Dial("tcp", addr.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			tc.send(c)
			reply, _ := io.ReadAll(c)
			if !strings.Contains(string(reply), tc.wantReply) {
				t.Errorf("client read %q, want it to contain %q", reply, tc.wantReply)
			}
			xdstest.Eventually(t, "the log to say "+tc.wantLog, func() bool { return strings.Contains(logs.String(), tc.wantLog) })
		})
	}
}

func TestSilentClientsDoNotHoldUpOthers(t *testing.T) {
	leakcheck.Check(t)
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&digestLog{}))
	dir, err := os.MkdirTemp("", "guard")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	unixLis, err := net.Listen("unix", filepath.Join(dir, "tap.sock"))
	if err != nil {
		t.Fatal(err)
	}

	for _, lis := range []net.Listener{xdstest.ListenTCP(t), unixLis} {
		t.Run(lis.Addr().Network(), func(t *testing.T) {
			_, addr := startTap(t, tap.Config{Upstream: up.Addr}, lis)
			// Connected first, and never a byte: the tap waits up to 10 s for
			// their first bytes, which must not delay anyone else.
			for range 3 {
				silent, err := net.Dial(addr.Network, addr.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer silent.Close()
			}

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s := xdstest.MustOpenRaw(t, ctx, xdstest.MustDial(t, addr), xdstest.ADSMethod)
			if err := xdstest.Send(s, []byte("abc")); err != nil {
				t.Fatalf("send: %v", err)
			}
			got, err := xdstest.Recv(s)
			if err != nil {
				t.Fatalf("with silent clients connected, the RPC failed: %v", err)
			}
			if diff := cmp.Diff([]byte("cba"), got); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			s.CloseSend()
		})
	}
}
