// Package gctune sets Go's garbage collector for a tap: collect less often than Go's default, within the container's memory limit.
package gctune

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultPercent is the GC percent a tap runs with when GOGC is not set.
// Everything a push allocates (its span, its log line, its events) is
// garbage a moment later; at Go's default of 100, 200 proxies each receiving
// ten pushes a second made a collection every second, and the pushes that met
// one took a millisecond longer (docs/performance.md, W2). 200 halves the
// collections for a heap at most a third larger.
const DefaultPercent = 200

// LimitShare is the part of the container's memory limit that the heap may
// grow to before the collector works harder (GOMEMLIMIT), so that collecting
// less often never gets the container killed.
const LimitShare = 0.9

// SoftLimit is the soft memory limit Apply sets in a container whose
// memory limit is containerLimit.
func SoftLimit(containerLimit int64) int64 { return int64(float64(containerLimit) * LimitShare) }

// defaultSource is Settings.PercentSource when the percent is adstap's.
const defaultSource = "adstap default"

// Settings are what Apply chose, for the start-up log.
type Settings struct {
	Percent       int    // the GC percent in force
	PercentSource string // "GOGC" or "adstap default"
	MemoryLimit   int64  // the soft memory limit in force; math.MaxInt64: none
	LimitSource   string // "GOMEMLIMIT", "cgroup" (LimitShare of the container's limit) or "none"
}

// Apply sets the GC percent to DefaultPercent unless GOGC is set, and the
// soft memory limit to LimitShare of the cgroup's memory limit unless
// GOMEMLIMIT is set. cgroup is the cgroup file system, normally
// os.DirFS("/sys/fs/cgroup"); nil skips the limit.
func Apply(getenv func(string) string, cgroup fs.FS) Settings {
	s := Settings{PercentSource: "GOGC", LimitSource: "GOMEMLIMIT"}
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultPercent)
		s.PercentSource = defaultSource
	}
	s.Percent = debug.SetGCPercent(-1)
	debug.SetGCPercent(s.Percent)
	if getenv("GOMEMLIMIT") == "" {
		s.LimitSource = "none"
		if limit, ok := cgroupLimit(cgroup); ok {
			debug.SetMemoryLimit(SoftLimit(limit))
			s.LimitSource = "cgroup"
		}
	}
	s.MemoryLimit = debug.SetMemoryLimit(-1)
	return s
}

// SystemCgroup is the cgroup file system of this process's container.
func SystemCgroup() fs.FS { return os.DirFS("/sys/fs/cgroup") }

// cgroupLimit reads the memory limit of the cgroup mounted at cgroup:
// memory.max (cgroup v2) or memory/memory.limit_in_bytes (v1). ok is false
// when there is none, or it cannot be read.
func cgroupLimit(cgroup fs.FS) (limit int64, ok bool) {
	if cgroup == nil {
		return 0, false
	}
	for _, name := range []string{"memory.max", "memory/memory.limit_in_bytes"} {
		b, err := fs.ReadFile(cgroup, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		// cgroup v1 says "no limit" with a number near 2^63 rounded to a page.
		if err != nil || n <= 0 || n >= math.MaxInt64/2 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
