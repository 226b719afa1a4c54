package main

import (
	"context"
	"errors"
	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/gctune"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/sidecar"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// TestLargePushWithinTheTemplatesMemoryLimit: adstap run, started with the
// injection template's flags and environment in a container of the
// template's memory limit, relays a 100 MB CDS push of 100,000 clusters
// from an upstream to a client, tracks it and its ACK, and captures it,
// while its peak RSS stays under the container's limit; then, with the
// stream idle, it gives back at least the push. There are no cgroups here:
// the process gets the soft memory limit internal/gctune would derive from
// the container's (GOMEMLIMIT).
func TestLargePushWithinTheTemplatesMemoryLimit(t *testing.T) {
	leakcheck.Check(t)
	if testing.Short() {
		t.Skip("builds adstap and pushes 100 MB through it")
	}
	dir := t.TempDir()
	bin := adstapbin.Build(t)
	const version, nonce = "2026-12-01T00:00:00Z/1", "1"
	push := xdstest.ClusterPush(100_000, 940, version, nonce)
	want := xxhash.Sum64(push)

	acked := make(chan struct{})
	up := xdstest.StartRawUpstream(t, func(_ any, s grpc.ServerStream) error {
		if _, err := xdstest.Recv(s); err != nil {
			return err
		}
		if err := xdstest.Send(s, push); err != nil {
			return err
		}
		if _, err := xdstest.Recv(s); err != nil {
			return err
		}
		close(acked)
		<-s.Context().Done()
		return nil
	})

	c, err := sidecar.Injected()
	if err != nil {
		t.Fatal(err)
	}
	captures := filepath.Join(dir, "capture")
	if err := os.Mkdir(captures, 0o755); err != nil {
		t.Fatal(err)
	}
	args, env, err := c.CommandLine(map[string]string{
		"--listen":               "unix://" + filepath.Join(dir, "xds.sock"),
		"--upstream":             up.Addr.Addr,
		"--upstream-ca":          "", // plaintext on loopback
		"--upstream-server-name": "",
		"--capture":              filepath.Join(captures, "xds.capture"),
		"--metrics-listen":       "127.0.0.1:0",
		"--csds-listen":          "127.0.0.1:0",
		"ADSTAP_ADMIN":           "127.0.0.1:0",
		// No collector here; the pod's name and namespace come from the kubelet.
		"OTEL_EXPORTER_OTLP_ENDPOINT": "",
		"POD_NAME":                    "",
		"POD_NAMESPACE":               "",
	})
	if err != nil {
		t.Fatal(err)
	}
	// Debug logging says when memory was given back, and the profiler
	// what still holds it, should it not come back.
	env = append(env, "ADSTAP_LOG_LEVEL=debug", "ADSTAP_PPROF=true", "GOMEMLIMIT="+strconv.FormatInt(gctune.SoftLimit(c.MemoryLimit), 10))
	p, err := sidecar.Start(bin, args, env)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Stop(); err != nil {
			t.Errorf("adstap run: %v", err)
		}
		if t.Failed() {
			t.Logf("adstap's log:\n%s", p.Log.String())
		}
	}()
	before, err := p.Memory()
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, xdstest.MustDial(t, tap.Address{Network: "unix", Addr: p.Listen}), xdstest.ADSMethod)
	if err := xdstest.Send(s, xdstest.RequestFrame(&core.Node{Id: "sidecar~10.0.0.1~big.default~default.svc.cluster.local"}, xdstest.ClusterType, "", "", "")); err != nil {
		t.Fatal(err)
	}
	f := &codec.RawMessage{}
	if err := s.RecvMsg(f); err != nil {
		t.Fatalf("receiving the push: %v", err)
	}
	got := xxhash.New()
	for _, b := range f.Data {
		got.Write(b.ReadOnlyData())
	}
	f.Data.Free()
	if got.Sum64() != want {
		t.Fatalf("the client received a push of hash %x, want %x", got.Sum64(), want)
	}
	if err := xdstest.Send(s, xdstest.RequestFrame(nil, xdstest.ClusterType, version, nonce, "")); err != nil {
		t.Fatal(err)
	}
	<-acked
	xdstest.EventuallyWithin(t, time.Minute, "the tap to track the push and its ACK", func() bool {
		for _, st := range getStreams(t, p.Admin, "").Streams {
			if ts, ok := st.Types[xdstest.ClusterType]; ok && ts.State == "SYNCED" && ts.LastAckedNonce == nonce {
				return true
			}
		}
		return false
	})
	xdstest.EventuallyWithin(t, time.Minute, "the push in the capture", func() bool { return captured(t, captures, want) })
	// Over the template's --observe-queue-bytes, it was observed apart from it.
	if got := value(t, scrape(t, p.Admin), "adstap_observe_over_bound_total"); got != 1 {
		t.Errorf("adstap_observe_over_bound_total = %v, want 1: the push, larger than the observe queue", got)
	}

	m, err := p.Memory()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RSS before the push %.1f MiB; peak %.1f MiB (VmHWM) against the container's limit of %d MiB", mib(before.RSS), mib(m.Peak), c.MemoryLimit>>20)
	if m.Peak >= c.MemoryLimit {
		t.Errorf("peak RSS %.1f MiB: over the container's limit of %d MiB, where the kubelet kills it", mib(m.Peak), c.MemoryLimit>>20)
	}
	// Idle, the tap holds what it tracks of the push (a name, a hash and a
	// position per resource), not the push: it has given that back, at the
	// latest once its tries to have run out (a loaded machine's outputs let
	// go of the push later, and the give-back retries later each time).
	bound := m.Peak - int64(len(push))
	start := time.Now()
	if !xdstest.Until(gctune.GiveBackWithin(time.Second)+5*time.Second, func() bool {
		m, err = p.Memory()
		return err == nil && m.RSS <= bound
	}) {
		t.Errorf("RSS %.1f MiB with the stream idle for %v: want it back under the peak less the push, %.1f MiB", mib(m.RSS), time.Since(start).Round(time.Second), mib(bound))
		logWhatHoldsMemory(t, p.Admin)
	}
	t.Logf("RSS %.1f MiB once idle, %v after the push was tracked", mib(m.RSS), time.Since(start).Round(time.Millisecond))
}

// captured reports whether the capture files in dir hold a frame whose
// bytes hash to want.
func captured(t *testing.T, dir string, want uint64) bool {
	files, err := filepath.Glob(filepath.Join(dir, "xds.capture*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		rd := capture.NewReader(f, name)
		for {
			r, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, capture.ErrIncomplete) {
					t.Errorf("reading %s: %v", name, err)
				}
				break
			}
			if r.Kind == capture.KindFrame && xxhash.Sum64(r.Message) == want {
				f.Close()
				return true
			}
		}
		f.Close()
	}
	return false
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// logWhatHoldsMemory logs what the tap's runtime says it holds (Go's
// collector's metrics: live heap, pages not returned, stacks), the
// allocations of a MiB or more still live after a collection (from the
// heap profile) and its goroutines.
func logWhatHoldsMemory(t *testing.T, admin string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(string(scrape(t, admin)), "\n") {
		if strings.HasPrefix(l, "go_memstats_") || strings.HasPrefix(l, "go_goroutines") || strings.HasPrefix(l, "go_gc_") {
			lines = append(lines, l)
		}
	}
	t.Logf("adstap's runtime:\n%s", strings.Join(lines, "\n"))
	for _, q := range []string{"heap?gc=1&debug=1", "goroutine?debug=1"} {
		resp, err := http.Get("http://" + admin + "/debug/pprof/" + q)
		if err != nil {
			t.Logf("/debug/pprof/%s: %v", q, err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Logf("/debug/pprof/%s: %v", q, err)
		}
		text := string(b)
		if strings.HasPrefix(q, "heap") {
			text = largeRecords(text, 1<<20)
		}
		t.Logf("/debug/pprof/%s:\n%s", q, text)
	}
}

// largeRecords keeps the records of a heap profile in text (debug=1) that
// hold at least least bytes in use, with their stacks.
func largeRecords(text string, least int64) string {
	var out []string
	keep := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "#") {
			if keep {
				out = append(out, l)
			}
			continue
		}
		// "objects: bytes [allocated objects: bytes] @ stack"
		_, rest, ok := strings.Cut(l, ": ")
		inUse, _, _ := strings.Cut(rest, " ")
		n, err := strconv.ParseInt(inUse, 10, 64)
		keep = ok && err == nil && n >= least
		if keep {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
