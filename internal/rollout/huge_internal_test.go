package rollout

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/track"
)

// TestRolloutOfAHugeTrace: a trace of the size unfolded NACK loops left
// (49,069 spans in 20 s; here 3,000, or 60,000 with ADSTAP_SOAK=1), one
// NACK span per push, in a real Jaeger. rollout reads it over HTTP and
// gRPC up to the most spans a read keeps (1,000 here; DefaultMaxSpans in
// the long form), says that it left the rest out, and names the NACK.
func TestRolloutOfAHugeTrace(t *testing.T) {
	leakcheck.Check(t)
	n, max := 3000, 1000
	if os.Getenv("ADSTAP_SOAK") == "1" {
		n, max = 60_000, DefaultMaxSpans
	}
	j := jaegertest.Start(t)
	const version = "2026-12-03T08:30:00Z/1"
	service := fmt.Sprintf("adstap-huge-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=looping,k8s.namespace.name=shop")
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: "http://" + j.OTLPGRPC,
		QueueSize: n + 100, MaxSpansPerStream: -1, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Minute)
	for i := range n {
		// Events from outside a tracker (no stream): never folded.
		p := track.Push{StreamID: 1, Node: track.Node{ID: "sidecar~10.0.0.9~looping.shop~shop.svc.cluster.local"},
			TypeURL: codec.TypeCluster, Type: "cds", Version: version, FullPush: true, Nonce: fmt.Sprint(i), Content: uint64(i), SentAt: at}
		tr.OnEvent(track.PushEnded{Push: new(p), Result: track.ResultNACK, At: at.Add(time.Millisecond), ErrorCode: 3,
			Error: "cluster outbound|8080||svc: unexpected lbPolicy MAGLEV"})
		at = at.Add(500 * time.Microsecond)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := tr.Dropped(); d != 0 {
		t.Fatalf("%d spans dropped on their way to Jaeger", d)
	}
	// Jaeger's own answer for the whole trace, for the figures: the time
	// to its first byte is Jaeger's, whatever reads it.
	id := tracing.VersionTraceID("", version).String()
	xdstest.EventuallyWithin(t, 120*time.Second, "the whole trace in Jaeger", func() bool {
		began := time.Now()
		resp, err := http.Get("http://" + j.QueryHTTP + "/api/v3/traces/" + id)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		first := time.Since(began)
		size, _ := io.Copy(io.Discard, resp.Body)
		t.Logf("FIGURE huge-trace-jaeger: GET /api/v3/traces/%s: %s, first byte after %s, %d bytes after %s", id, resp.Status, first.Round(time.Millisecond), size, time.Since(began).Round(time.Millisecond))
		return resp.StatusCode == http.StatusOK && size > int64(n)*500
	})
	for _, target := range []string{"http://" + j.QueryHTTP, j.QueryGRPC} {
		jq, err := Dial(target)
		if err != nil {
			t.Fatal(err)
		}
		jq.maxSpans = max
		var rep Report
		var took time.Duration
		var before, after runtime.MemStats
		xdstest.EventuallyWithin(t, 120*time.Second, "the whole trace in Jaeger", func() bool {
			runtime.GC()
			runtime.ReadMemStats(&before)
			began := time.Now()
			rep, err = Read(context.Background(), jq, Query{Service: service, Version: version, Since: time.Hour})
			took = time.Since(began)
			runtime.ReadMemStats(&after)
			return err == nil && len(rep.Rounds) == 1 && rep.Rounds[0].Proxies[0].NACKs == min(n, max) && (n <= max || rep.Note != "")
		})
		jq.Close()
		t.Logf("FIGURE rollout-huge-trace: %s: %d NACK spans, read %d in %s, %.1f MiB allocated; note %q",
			target, n, rep.Rounds[0].Proxies[0].NACKs, took.Round(time.Millisecond), float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), rep.Note)
		p := rep.Rounds[0].Proxies[0]
		if p.State != StateNACKed || !strings.Contains(p.Message, "MAGLEV") || !strings.Contains(rep.Note, fmt.Sprintf("read the first %d", max)) {
			t.Errorf("%s: proxy %+v, note %q; want the NACK and a note that it read the first %d spans", target, p, rep.Note, max)
		}
	}
}
