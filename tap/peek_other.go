//go:build !linux

package tap

import (
	"errors"
	"net"
)

// peek is only written for Linux; elsewhere connections are wrapped, and
// checked as gRPC reads them.
func peek(net.Conn, []byte, func([]byte) bool) (int, error) {
	return 0, errNoPeek
}

// errNoPeek says the connection's bytes cannot be looked at without reading
// them, so the connection is wrapped instead.
var errNoPeek = errors.New("connection cannot be peeked")
