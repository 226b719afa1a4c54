//go:build !linux

package sidecar

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
