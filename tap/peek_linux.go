package tap

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// peek copies the first bytes c has received into buf without consuming them,
// so whoever reads c next reads them again. It returns once buf is full or
// enough says what has arrived is enough, at c's read deadline, or on an
// error, with what had arrived by then.
func peek(c net.Conn, buf []byte, enough func([]byte) bool) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, errNoPeek
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errNoPeek, err)
	}
	var n int
	var peekErr error
	err = raw.Read(func(fd uintptr) bool {
		var m int
		var err error
		for {
			// MSG_DONTWAIT: the runtime's poller does the waiting, where
			// the read deadline and a Close can end it.
			m, _, err = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return false
		case err != nil:
			peekErr = fmt.Errorf("peeking: %w", err)
			return true
		case m <= 0:
			peekErr = io.EOF
			return true
		}
		n = m
		// Returning false with bytes waiting still parks until more arrive:
		// the poller is edge-triggered, so it wakes for new bytes, not for
		// the ones a peek left in place.
		return m == len(buf) || enough(buf[:m])
	})
	if peekErr != nil {
		return n, peekErr
	}
	if err != nil {
		return n, fmt.Errorf("waiting for the first bytes: %w", err)
	}
	return n, nil
}

// errNoPeek says the connection's bytes cannot be looked at without reading
// them, so the connection is wrapped instead.
var errNoPeek = errors.New("connection cannot be peeked")
