//go:build !linux

package reliability

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
