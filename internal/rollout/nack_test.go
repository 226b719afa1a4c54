package rollout_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/rollout"
	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNACKsFromTheirTraces: two taps' spans of one push round in a real
// Jaeger, each proxy NACKing with its own message; given the round's trace
// id (as a metric exemplar carries it) and the proxy, NACKs returns each
// one's message, source and Istio object, and says so when a proxy of the
// round did not NACK.
func TestNACKsFromTheirTraces(t *testing.T) {
	leakcheck.Check(t)
	j := jaegertest.Start(t)
	const scope, version = "mesh-nacks", "2026-12-01T11:07:12Z/8"
	at := time.Now().Add(-time.Minute)
	pods := []struct{ pod, node, message string }{
		{"reviews-0", "sidecar~10.0.0.1~reviews-0.shop~shop.svc.cluster.local", "unknown lb_policy (0)"},
		{"reviews-1", "sidecar~10.0.0.2~reviews-1.shop~shop.svc.cluster.local", "unknown lb_policy (1)"},
		{"ratings-0", "sidecar~10.0.0.3~ratings-0.shop~shop.svc.cluster.local", ""},
	}
	for i, p := range pods {
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name="+p.pod+",k8s.namespace.name=shop")
		tr, err := tracing.New(context.Background(), tracing.Config{
			Endpoint: "http://" + j.OTLPGRPC, Scope: scope, Getenv: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		stream := uint64(i + 1)
		push := track.Push{StreamID: stream, Node: track.Node{ID: p.node}, TypeURL: codec.TypeCluster, Type: "cds",
			Version: version, Nonce: "1", FullPush: true, SentAt: at}
		tr.OnEvent(track.StreamOpened{Stream: track.StreamMeta{ID: stream, Protocol: codec.SotW, OpenedAt: at}})
		tr.OnEvent(track.PushSent{Push: new(push)})
		end := track.PushEnded{Push: new(push), Result: track.ResultACK, At: at.Add(time.Millisecond)}
		if p.message != "" {
			end.Result, end.Error, end.ErrorCode = track.ResultNACK, p.message, 3
		}
		tr.OnEvent(end)
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	jq, err := rollout.Dial(j.QueryGRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer jq.Close()
	trace := tracing.VersionTraceID(scope, version).String()
	refs := []rollout.NACKRef{
		{TraceID: trace, Pod: "reviews-1.shop", Type: "cds"},
		{TraceID: trace, Node: pods[0].node},
		{TraceID: trace, Pod: "ratings-0.shop"}, // ACKed
	}
	var got []rollout.NACK
	xdstest.EventuallyWithin(t, 30*time.Second, "the round's three spans in Jaeger", func() bool {
		got, err = rollout.NACKs(context.Background(), jq, refs)
		return err == nil && got[0].Found && got[1].Found
	})
	if got[0].Message != pods[1].message || got[1].Message != pods[0].message || got[2].Found {
		t.Errorf("NACKs = %+v; want reviews-1's message, reviews-0's, and none for ratings-0", got)
	}
	// A trace Jaeger does not have: not found, not an error.
	none, err := rollout.NACKs(context.Background(), jq, []rollout.NACKRef{{TraceID: "0123456789abcdef0123456789abcdef", Pod: "reviews-0.shop"}})
	if err != nil || none[0].Found {
		t.Errorf("NACKs of an unknown trace = %+v, %v; want not found, no error", none, err)
	}
}
