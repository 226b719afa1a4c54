package benchmark

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestBinaryIsMadeToCollect: bench-compare starts each binary's windows
// right after a collection, as make bench does its own middles': the
// binary, run with --pprof, collects when SampleAfterGC asks, which its
// own metrics count.
func TestBinaryIsMadeToCollect(t *testing.T) {
	leakcheck.Check(t)
	if testing.Short() {
		t.Skip("builds adstap and starts it")
	}
	bin := adstapbin.Build(t)
	if !binariesCollect(map[Path]string{Head: bin, Base: bin}) {
		t.Fatal("adstap run -h does not list --pprof: its binary cannot be made to collect")
	}
	// An upstream that accepts and says nothing: no stream is opened.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	m, err := startBinary(bin, lis.Addr().String(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	admin := m.(*binaryMiddle).admin
	before := collections(t, admin)
	if _, err := m.SampleAfterGC(); err != nil {
		t.Fatal(err)
	}
	if got := collections(t, admin); got <= before {
		t.Errorf("go_gc_duration_seconds_count %d after SampleAfterGC, %d before: the binary did not collect", got, before)
	}
}

// collections is the binary's count of finished collections, from its metrics.
func collections(t *testing.T, admin string) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_gc_duration_seconds_count "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no go_gc_duration_seconds_count in the binary's metrics (%v)", sc.Err())
	return 0
}
