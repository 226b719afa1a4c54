package tap

import (
	"fmt"
	"net"
	"strings"
)

// Address is a place the tap listens on or dials: TCP host:port, or a Unix socket.
type Address struct {
	Network string // "tcp" or "unix"
	Addr    string // host:port or the socket path
}

// ParseAddress reads "host:port", "[::1]:port" or "unix:///path/to/socket".
func ParseAddress(s string) (Address, error) {
	if path, ok := strings.CutPrefix(s, "unix://"); ok {
		if !strings.HasPrefix(path, "/") {
			return Address{}, fmt.Errorf("address %q: a Unix socket is written unix:///absolute/path", s)
		}
		return Address{Network: "unix", Addr: path}, nil
	}
	if strings.Contains(s, "://") {
		return Address{}, fmt.Errorf("address %q: want host:port or unix:///path", s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Address{}, fmt.Errorf("address %q: want host:port or unix:///path: %w", s, err)
	}
	if port == "" {
		return Address{}, fmt.Errorf("address %q: the port is missing", s)
	}
	return Address{Network: "tcp", Addr: net.JoinHostPort(host, port)}, nil
}

func (a Address) String() string {
	if a.Network == "unix" {
		return "unix://" + a.Addr
	}
	return a.Addr
}
