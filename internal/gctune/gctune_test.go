package gctune_test

import (
	"math"
	"runtime/debug"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/gctune"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCgroupLimit(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name   string
		files  fstest.MapFS
		want   int64
		wantOK bool
	}{
		{"v2 limit", fstest.MapFS{"memory.max": {Data: []byte("268435456\n")}}, 268435456, true},
		{"v2 no limit", fstest.MapFS{"memory.max": {Data: []byte("max\n")}}, 0, false},
		{"v1 limit", fstest.MapFS{"memory/memory.limit_in_bytes": {Data: []byte("134217728\n")}}, 134217728, true},
		{"v1 no limit", fstest.MapFS{"memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")}}, 0, false},
		{"garbage", fstest.MapFS{"memory.max": {Data: []byte("lots")}}, 0, false},
		{"no cgroup files", fstest.MapFS{}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := gctune.CgroupLimit(tc.files)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("CgroupLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestApply(t *testing.T) {
	leakcheck.Check(t)
	limit := float64(256 << 20)
	cgroup := fstest.MapFS{"memory.max": {Data: []byte("268435456")}}
	tests := []struct {
		name   string
		env    map[string]string
		cgroup fstest.MapFS
		want   gctune.Settings
	}{
		{"defaults in a container", nil, cgroup,
			gctune.Settings{Percent: gctune.DefaultPercent, PercentSource: "adstap default", MemoryLimit: int64(limit * gctune.LimitShare), LimitSource: "cgroup"}},
		{"defaults without a limit", nil, fstest.MapFS{"memory.max": {Data: []byte("max")}},
			gctune.Settings{Percent: gctune.DefaultPercent, PercentSource: "adstap default", MemoryLimit: math.MaxInt64, LimitSource: "none"}},
		// The runtime applied GOGC and GOMEMLIMIT at start; Apply leaves
		// whatever is in force (here, what the test set before).
		{"the user's GOGC and GOMEMLIMIT win", map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}, cgroup,
			gctune.Settings{Percent: 100, PercentSource: "GOGC", MemoryLimit: 1 << 30, LimitSource: "GOMEMLIMIT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer debug.SetGCPercent(debug.SetGCPercent(100))
			// What the runtime would have set from the environment.
			inForce := int64(math.MaxInt64)
			if tc.env["GOMEMLIMIT"] != "" {
				inForce = 1 << 30
			}
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(inForce))
			got := gctune.Apply(func(k string) string { return tc.env[k] }, tc.cgroup)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Apply (-want +got):\n%s", diff)
			}
		})
	}
}
