package reliability

import "syscall"

// sysProcAttr has a child upstream killed when the test binary dies without
// running its cleanups (a panic, go test's -timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
