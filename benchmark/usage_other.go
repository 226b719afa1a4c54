//go:build !linux

package benchmark

import (
	"errors"
	"runtime"
	"syscall"
	"time"
)

// SelfUsage is only implemented on Linux, which the harness needs.
func SelfUsage() (Usage, error) {
	return Usage{Goroutines: runtime.NumGoroutine()}, errors.New("bench: process usage is read from /proc (Linux only)")
}

// ResetPeakRSS is only implemented on Linux.
func ResetPeakRSS() error { return errors.New("bench: clear_refs is Linux only") }

// MachineCPU is only implemented on Linux.
func MachineCPU() (all, self time.Duration, err error) {
	return 0, 0, errors.New("bench: /proc/stat is Linux only")
}

// RaiseFileLimit does nothing off Linux.
func RaiseFileLimit() {}

// FileLimit is only implemented on Linux.
func FileLimit() (uint64, error) { return 0, errors.New("bench: getrlimit is Linux only") }

func processUsage(int) (Usage, error) { return Usage{}, errors.New("bench: /proc is Linux only") }

func resetPeakRSSOf(int) error { return errors.New("bench: clear_refs is Linux only") }

func childProcAttr() *syscall.SysProcAttr { return nil }
