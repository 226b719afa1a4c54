package jaegertest

import "syscall"

// sysProcAttr has Jaeger killed when the test binary dies without running
// its cleanups (a panic, go test's -timeout), so no Jaeger outlives it
// holding ports.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
