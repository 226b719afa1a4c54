package tap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Listen opens the tap's listener. A Unix socket file left behind by a tap
// that died is removed first; one that a live process still serves is not.
func Listen(addr Address) (net.Listener, error) {
	if addr.Network == "unix" {
		if err := removeStaleSocket(addr.Addr); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen(addr.Network, addr.Addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	return lis, nil
}

func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listening on unix://%s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("listening on unix://%s: the path exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("listening on unix://%s: another process is serving this socket", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing stale socket unix://%s: %w", path, err)
	}
	return nil
}
