package tap

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// h2Preface starts every HTTP/2 connection made without TLS.
var h2Preface = []byte("PRI * HTTP/2.0")

var http1Methods = [][]byte{
	[]byte("GET "), []byte("POST "), []byte("PUT "), []byte("HEAD "), []byte("DELETE "),
	[]byte("OPTIONS "), []byte("PATCH "), []byte("CONNECT "), []byte("TRACE "),
}

// errWrongProtocol ends a connection whose first bytes are not what the
// listener serves.
var errWrongProtocol = errors.New("client does not speak the listener's protocol")

// guardedListener looks at the first bytes of every connection, so a client
// speaking the wrong protocol (curl, a browser, TLS to a plaintext port, or
// the reverse) gets a clear answer and a log line instead of a silent close.
type guardedListener struct {
	net.Listener
	tls bool
	log *slog.Logger
}

func (l guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &guardedConn{Conn: c, tls: l.tls, log: l.log}, nil
}

type guardedConn struct {
	net.Conn
	tls     bool
	log     *slog.Logger
	checked bool
}

// Read checks the first bytes the client sends; gRPC reads them on the
// connection's own goroutine, so nothing else waits on the check.
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.checked || n == 0 {
		return n, err
	}
	c.checked = true
	if reply, problem := c.diagnose(p[:n]); problem != "" {
		c.log.Warn("refused a client speaking the wrong protocol", "peer", c.RemoteAddr(), "problem", problem)
		if reply != "" {
			c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			c.Conn.Write([]byte(reply))
		}
		c.Conn.Close()
		return 0, fmt.Errorf("%w: %s", errWrongProtocol, problem)
	}
	return n, err
}

// diagnose names what is wrong with a connection's first bytes, and what to
// answer, if anything can be answered in the client's own protocol.
func (c *guardedConn) diagnose(first []byte) (reply, problem string) {
	if isHTTP1(first) {
		if c.tls {
			return httpReply(400, "Bad Request",
					"adstap: this port serves gRPC over TLS; the request was plaintext HTTP/1.x\n"),
				"plaintext HTTP/1.x request on a TLS listener"
		}
		return httpReply(426, "Upgrade Required",
				"adstap: this port serves gRPC (HTTP/2); the request was HTTP/1.x. xDS clients connect here, not browsers or curl without --http2-prior-knowledge\n"),
			"HTTP/1.x request on a gRPC listener"
	}
	if c.tls && bytes.HasPrefix(h2Preface, first[:min(len(first), len(h2Preface))]) {
		return "", "plaintext HTTP/2 on a TLS listener: the client must use TLS (or run adstap without --listen-cert)"
	}
	if !c.tls && first[0] == 0x16 {
		return "", "TLS handshake on a plaintext listener: the client must dial plaintext, or run adstap with --listen-cert and --listen-key"
	}
	return "", ""
}

func isHTTP1(first []byte) bool {
	for _, m := range http1Methods {
		if bytes.HasPrefix(first, m) {
			return true
		}
	}
	return false
}

func httpReply(code int, reason, body string) string {
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, reason, len(body), body)
}
