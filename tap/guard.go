package tap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// h2Preface starts every HTTP/2 connection made without TLS.
var h2Preface = []byte("PRI * HTTP/2.0")

var http1Methods = [][]byte{
	[]byte("GET "), []byte("POST "), []byte("PUT "), []byte("HEAD "), []byte("DELETE "),
	[]byte("OPTIONS "), []byte("PATCH "), []byte("CONNECT "), []byte("TRACE "),
}

// peekLen is as many first bytes as diagnose ever needs: the longest HTTP/1
// method with its space. TLS and the HTTP/2 preface are told by fewer.
var peekLen = func() int {
	n := 0
	for _, m := range http1Methods {
		n = max(n, len(m))
	}
	return n
}()

// defaultPeekTimeout bounds the wait for a connection's first bytes. xDS
// clients send the HTTP/2 preface or a TLS ClientHello as soon as they
// connect; one still silent after this long goes to gRPC unexamined, which
// serves it if it ever speaks and otherwise ends it at its own connection
// timeout (120 s). It only has to outlast a slow network's first segment,
// and it keeps a silent client's goroutine short-lived.
const defaultPeekTimeout = 10 * time.Second

// refuseDrainTimeout bounds how long a refused connection is read after the
// answer, so its close is a FIN the client reads the answer before, not an
// RST for bytes it sent that were never read.
const refuseDrainTimeout = time.Second

// errWrongProtocol ends a connection whose first bytes are not what the
// listener serves.
var errWrongProtocol = errors.New("client does not speak the listener's protocol")

// guardedListener looks at the first bytes of every connection, so a client
// speaking the wrong protocol (curl, a browser, TLS to a plaintext port, or
// the reverse) gets a clear answer and a log line instead of a silent close.
//
// TCP and Unix connections are looked at with MSG_PEEK and then handed to
// gRPC as they are: gRPC reads a bare *net.TCPConn or *net.UnixConn into
// pooled buffers only while data is waiting, where any wrapper costs every
// connection a 32 KB bufio.Reader for its whole life. Peeking can wait on a
// client, so it runs on a goroutine per connection, off the accept path:
// one silent client must not hold up the next. Other connections are
// wrapped in a guardedConn, which checks the bytes gRPC reads first.
type guardedListener struct {
	net.Listener
	tls         bool
	log         *slog.Logger
	peekTimeout time.Duration
	// maxPending bounds the connections being checked at once: each holds
	// a goroutine and a socket while its client says nothing. Past it new
	// connections are closed on arrival, counted in limits.
	maxPending int64
	unchecked  atomic.Int64
	limits     *limits
	// peeked, when set (tests, before the first connection), is told how
	// many first bytes each look at a connection found and whether they
	// were enough to judge it.
	peeked func(n int, judged bool)

	// ready carries the connections checked and the temporary Accept errors
	// to Accept, so gRPC backs off on those as it would without the guard.
	ready chan acceptResult
	// failed is closed when the inner Accept has failed for good, with err.
	failed chan struct{}
	err    error
	// done is closed by Close.
	done chan struct{}
	// loops counts the accept loop and the goroutines checking connections,
	// so that Close returns only after they have all ended.
	loops sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	checking map[net.Conn]struct{} // so Close can interrupt the waits on them

	closeOnce sync.Once
	closeErr  error
}

type acceptResult struct {
	conn net.Conn
	err  error
}

// newGuardedListener starts accepting on lis, waiting up to peekTimeout for
// each connection's first bytes, with at most maxPending connections waiting
// (refusals counted in lim); Close stops it.
func newGuardedListener(lis net.Listener, tls bool, log *slog.Logger, peekTimeout time.Duration, maxPending int, lim *limits, opts ...func(*guardedListener)) *guardedListener {
	l := &guardedListener{
		Listener:    lis,
		tls:         tls,
		log:         log,
		peekTimeout: peekTimeout,
		maxPending:  int64(maxPending),
		limits:      lim,
		ready:       make(chan acceptResult),
		failed:      make(chan struct{}),
		done:        make(chan struct{}),
		checking:    make(map[net.Conn]struct{}),
	}
	for _, o := range opts {
		o(l)
	}
	l.loops.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next connection that passed the check, or, once the
// listener has failed or been closed, the error that ended it.
func (l *guardedListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.ready:
		return r.conn, r.err
	case <-l.failed:
		return nil, l.err
	}
}

// Close closes the listener, ends every check still waiting, and returns once
// no goroutine of the listener is left.
func (l *guardedListener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		for c := range l.checking {
			c.Close()
		}
		l.mu.Unlock()
		close(l.done)
		l.closeErr = l.Listener.Close()
		l.loops.Wait()
	})
	return l.closeErr
}

func (l *guardedListener) acceptLoop() {
	defer l.loops.Done()
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if temporary(err) {
				if l.pass(acceptResult{err: err}) {
					continue
				}
				// Closed while gRPC was backing off: Accept must now end
				// gRPC's loop, which a temporary error would not.
				err = fmt.Errorf("accepting on %s: %w", l.Addr(), net.ErrClosed)
			}
			l.err = err
			close(l.failed)
			return
		}
		if l.unchecked.Add(1) > l.maxPending {
			l.unchecked.Add(-1)
			l.refuseUnchecked(c)
			continue
		}
		l.loops.Add(1)
		go l.check(c)
	}
}

// refuseUnchecked closes a connection that arrived while maxPending others
// were still being checked: a flood of clients that connect and say nothing
// must not cost a goroutine each.
func (l *guardedListener) refuseUnchecked(c net.Conn) {
	c.Close()
	l.limits.conns.Add(1)
	if l.limits.shouldWarn(2) {
		l.log.Warn("refusing connections: --max-pending-connections are waiting to send their first bytes",
			"limit", l.maxPending, "refused_total", l.limits.conns.Load(), "peer", c.RemoteAddr().String())
	}
}

// temporary is gRPC's own test for an Accept error worth retrying.
func temporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// pass hands r to Accept; it reports false if the listener closed first.
func (l *guardedListener) pass(r acceptResult) bool {
	select {
	case l.ready <- r:
		return true
	case <-l.done:
		return false
	}
}

// check examines one new connection and passes it on to gRPC unless it was
// refused.
func (l *guardedListener) check(c net.Conn) {
	defer l.loops.Done()
	defer l.unchecked.Add(-1)
	if !l.startChecking(c) {
		c.Close()
		return
	}
	next := l.examine(c)
	if !l.stopChecking(c) {
		c.Close()
		return
	}
	if next != nil && !l.pass(acceptResult{conn: next}) {
		next.Close()
	}
}

func (l *guardedListener) startChecking(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.checking[c] = struct{}{}
	return true
}

func (l *guardedListener) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// stopChecking reports false if Close came first, which has closed c.
func (l *guardedListener) stopChecking(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.checking, c)
	return !l.closed
}

// examine returns the connection gRPC is to serve: c itself when it could be
// peeked at, a guardedConn when it could not, nil when it was refused.
func (l *guardedListener) examine(c net.Conn) net.Conn {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		// Peeking under a wrapper could read bytes that are not the
		// client's (a TLS layer's, say); only the kernel's own sockets.
		return &guardedConn{Conn: c, tls: l.tls, log: l.log}
	}
	first, err := l.peekFirst(c)
	switch {
	case err != nil && l.isClosed():
		// Close cut the wait short: what had arrived says nothing.
		return c
	case errors.Is(err, errNoPeek):
		return &guardedConn{Conn: c, tls: l.tls, log: l.log}
	case len(first) == 0:
		// Silent, gone or failed: gRPC finds out for itself, and logs it
		// the way it logs any other connection that fails.
		if err != nil {
			l.log.Debug("passed a connection on unexamined", "peer", c.RemoteAddr(), "error", err)
		}
		return c
	}
	reply, problem := diagnose(first, l.tls)
	if problem == "" {
		return c
	}
	l.log.Warn("refused a client speaking the wrong protocol", "peer", c.RemoteAddr(), "problem", problem)
	refuse(c, reply)
	return nil
}

// peekFirst returns the first bytes c has received, leaving them to be read,
// waiting up to peekTimeout until there are enough to judge them.
func (l *guardedListener) peekFirst(c net.Conn) ([]byte, error) {
	if err := c.SetReadDeadline(time.Now().Add(l.peekTimeout)); err != nil {
		return nil, fmt.Errorf("setting the peek deadline: %w", err)
	}
	buf := make([]byte, peekLen)
	enough := decided
	if l.peeked != nil {
		enough = func(b []byte) bool {
			judged := decided(b)
			l.peeked(len(b), judged)
			return judged
		}
	}
	n, err := peek(c, buf, enough)
	if l.peeked != nil {
		l.peeked(n, true) // the look is over, whatever ended it
	}
	// gRPC sets and clears its own deadlines; one left here would cut the
	// connection in the middle of its life.
	if derr := c.SetReadDeadline(time.Time{}); derr != nil && err == nil {
		err = fmt.Errorf("clearing the peek deadline: %w", derr)
	}
	return buf[:n], err
}

// refuse answers a client that was never read from and closes the
// connection.
func refuse(c net.Conn, reply string) {
	c.SetDeadline(time.Now().Add(refuseDrainTimeout))
	if reply != "" {
		io.WriteString(c, reply)
	}
	// Closing with the client's bytes unread would reset the connection,
	// and the client could lose the answer with it: end our side, then read
	// what the client sent until it closes too.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, c)
	c.Close()
}

// guardedConn checks the first bytes gRPC reads, for connections that cannot
// be peeked at.
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
	if reply, problem := diagnose(p[:n], c.tls); problem != "" {
		c.log.Warn("refused a client speaking the wrong protocol", "peer", c.RemoteAddr(), "problem", problem)
		if reply != "" {
			c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			io.WriteString(c.Conn, reply)
		}
		c.Conn.Close()
		return 0, fmt.Errorf("%w: %s", errWrongProtocol, problem)
	}
	return n, err
}

// decided reports whether first says enough to be judged: not while it could
// still grow into an HTTP/1 request line, as "P" could become "POST " as
// well as the HTTP/2 preface.
func decided(first []byte) bool {
	if len(first) == 0 {
		return false
	}
	for _, m := range http1Methods {
		if len(first) < len(m) && bytes.HasPrefix(m, first) {
			return false
		}
	}
	return true
}

// diagnose names what is wrong with a connection's first bytes, and what to
// answer, if anything can be answered in the client's own protocol.
func diagnose(first []byte, tls bool) (reply, problem string) {
	if len(first) == 0 {
		return "", ""
	}
	if isHTTP1(first) {
		if tls {
			return httpReply(400, "Bad Request",
					"adstap: this port serves gRPC over TLS; the request was plaintext HTTP/1.x\n"),
				"plaintext HTTP/1.x request on a TLS listener"
		}
		return httpReply(426, "Upgrade Required",
				"adstap: this port serves gRPC (HTTP/2); the request was HTTP/1.x. xDS clients connect here, not browsers or curl without --http2-prior-knowledge\n"),
			"HTTP/1.x request on a gRPC listener"
	}
	if tls && bytes.HasPrefix(h2Preface, first[:min(len(first), len(h2Preface))]) {
		return "", "plaintext HTTP/2 on a TLS listener: the client must use TLS (or run adstap without --listen-cert)"
	}
	if !tls && first[0] == 0x16 {
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
