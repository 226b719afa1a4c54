package reliability_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	rel "github.com/adstap/adstap/test/reliability"
)

// field appends one length-delimited field: protowire by hand, since
// proto.Marshal refuses the invalid UTF-8 this test must send.
func field(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

// TestStringsThatAreNotUTF8: protobuf strings must be UTF-8, but the wire
// does not enforce it, and the tap relays what peers send. A client whose
// node id is not UTF-8, a control plane pushing a cluster whose name is not,
// and a NACK message that is not: every frame must arrive byte for byte,
// the tracker must follow the stream, the metrics must still be gathered
// (Prometheus panics on a label or exemplar that is not UTF-8) and the spans
// must reach Jaeger (the OTLP exporter drops a batch with such a string),
// showing U+FFFD where the bytes were.
func TestStringsThatAreNotUTF8(t *testing.T) {
	leakcheck.Check(t)
	const badNode = "sidecar~\xff\xfe~pod"
	badCluster := "outbound|80||bad-\xc3\x28.svc"
	cluster := func(name string, statName byte) []byte {
		return field(field(nil, 1, []byte(name)), 28, []byte{'a' + statName}) // name, alt_stat_name
	}
	anyOf := func(body []byte) []byte { return field(field(nil, 1, []byte(xdstest.ClusterType)), 2, body) }
	push := func(version, nonce string, clusters ...[]byte) []byte {
		b := field(nil, 1, []byte(version))
		for _, c := range clusters {
			b = field(b, 2, anyOf(c))
		}
		return field(field(b, 4, []byte(xdstest.ClusterType)), 5, []byte(nonce))
	}
	answer := func(node, version, nonce, nack string) []byte {
		var b []byte
		if version != "" {
			b = field(b, 1, []byte(version))
		}
		if node != "" {
			b = field(b, 2, field(nil, 1, []byte(node)))
		}
		b = field(b, 4, []byte(xdstest.ClusterType))
		if nonce != "" {
			b = field(b, 5, []byte(nonce))
		}
		if nack != "" {
			status := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3)
			b = field(b, 6, field(status, 2, []byte(nack)))
		}
		return b
	}
	pushes := [][]byte{
		push("1", "n1", cluster("ok", 1), cluster(badCluster, 1)),
		push("2", "n2", cluster("ok", 1), cluster(badCluster, 2)), // the bad one changed: NACKed
		push("3", "n3", cluster("ok", 1)),                         // the bad one removed
	}
	requests := [][]byte{
		answer(badNode, "", "", ""),
		answer("", "1", "n1", ""),
		answer("", "1", "n2", "cluster "+badCluster+": rejected \xff"),
		answer("", "3", "n3", ""),
	}

	j := jaegertest.Start(t)
	service := fmt.Sprintf("adstap-utf8-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	gotAtUpstream := make(chan []byte, len(requests))
	up := xdstest.StartRawUpstream(t, func(_ any, s grpc.ServerStream) error {
		for i := range requests {
			b, err := xdstest.Recv(s)
			if err != nil {
				return err
			}
			gotAtUpstream <- b
			if i < len(pushes) {
				if err := xdstest.Send(s, pushes[i]); err != nil {
					return err
				}
			}
		}
		<-s.Context().Done()
		return nil
	})
	tp := rel.StartTap(t, rel.TapOptions{Upstream: up.Addr, Tracing: &tracing.Config{Endpoint: "http://" + j.OTLPGRPC}})
	cc := tp.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := rel.OpenADS(t, ctx, cc)
	for i, req := range requests {
		if err := xdstest.Send(s, req); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := <-gotAtUpstream; !bytes.Equal(got, req) {
			t.Errorf("request %d reached the control plane changed:\n got %q\nwant %q", i, got, req)
		}
		if i == len(pushes) {
			break
		}
		got, err := xdstest.Recv(s)
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		if !bytes.Equal(got, pushes[i]) {
			t.Errorf("push %d reached the client changed:\n got %q\nwant %q", i, got, pushes[i])
		}
	}

	if !xdstest.Until(10*time.Second, func() bool { return tp.Metric(t, "adstap_push_ack_seconds", nil) == 3 }) {
		t.Fatalf("the tracker judged %v pushes, want 3", tp.Metric(t, "adstap_push_ack_seconds", nil))
	}
	for name, want := range map[string]float64{"adstap_acks_total": 2, "adstap_nacks_total": 1, "adstap_decode_errors_total": 0} {
		if got := tp.Metric(t, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	shownNode := strings.ToValidUTF8(badNode, "\uFFFD")
	shownCluster := strings.ToValidUTF8(badCluster, "\uFFFD")
	traces := j.WaitTraces(t, service, map[string]string{"xds.node.id": shownNode}, func(tr []jaegertest.Trace) bool {
		return countSpans(tr, "CDS push") == 3
	})
	var changed, nackMessage bool
	for _, tr := range traces {
		for _, sp := range tr.Spans {
			if v, ok := sp.Tag("xds.resources.changed_names"); ok && strings.Contains(fmt.Sprint(v), shownCluster) {
				changed = true
			}
			if v, ok := sp.Tag("otel.status_description"); ok && strings.Contains(fmt.Sprint(v), "rejected \uFFFD") {
				nackMessage = true
			}
		}
	}
	if !changed || !nackMessage {
		t.Errorf("spans in Jaeger: changed name %q shown %v, NACK message shown %v\n%v", shownCluster, changed, nackMessage, traces)
	}
	if d := tp.Tracing.Dropped(); d != 0 {
		t.Errorf("%d spans dropped", d)
	}
	if log := tp.Log.String(); !strings.Contains(log, shownNode) {
		t.Errorf("the live log never shows the node as %q:\n%s", shownNode, log)
	}
}

func countSpans(traces []jaegertest.Trace, name string) int {
	n := 0
	for _, tr := range traces {
		for _, sp := range tr.Spans {
			if sp.OperationName == name {
				n++
			}
		}
	}
	return n
}
