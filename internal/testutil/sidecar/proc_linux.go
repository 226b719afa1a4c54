package sidecar

import "syscall"

// sysProcAttr has adstap killed when its parent dies without stopping it (a
// panic, go test's -timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
