package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// startTracedTap starts the tap as adstap run does, with flags added to the
// listen, admin and upstream ones, and stops it at cleanup.
func startTracedTap(t *testing.T, upstream string, log *syncbuf.Buffer, flags ...string) (tapAddr, admin string) {
	t.Helper()
	var f runFlags
	args := append([]string{"--listen=127.0.0.1:0", "--admin=127.0.0.1:0", "--upstream=" + upstream}, flags...)
	if err := runCommand(&f).parse(args, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	rt, err := startTap(f, slog.New(slog.NewJSONHandler(log, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- rt.wait(ctx, 5*time.Second) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	return rt.Addr().String(), rt.AdminAddr()
}

// sotwClient is a raw ADS client that subscribes to every cluster and
// answers each push with ACK or, when reject says so, NACK.
func sotwClient(t *testing.T, ctx context.Context, tapAddr, node string, pushes int, reject func(*discovery.DiscoveryResponse) string) {
	t.Helper()
	s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, tapAddr))
	if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node, Cluster: "reviews"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	accepted := ""
	for i := 0; i < pushes; i++ {
		r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
		answer := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.Nonce, VersionInfo: r.VersionInfo}
		if msg := reject(r); msg != "" {
			answer.VersionInfo = accepted
			answer.ErrorDetail = &rpcstatus.Status{Code: 3, Message: msg}
		} else {
			accepted = r.VersionInfo
		}
		if err := s.Send(answer); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPushSpansInARealJaeger: two proxies get the same two istiod versions
// through the tap; one rejects the second. Jaeger must show a span per push
// with its attributes, the NACK as an error with the client's message, one
// trace per version holding both proxies' pushes, and each stream's connect
// span with its phases.
func TestPushSpansInARealJaeger(t *testing.T) {
	leakcheck.Check(t)
	j := jaegertest.Start(t)
	service := fmt.Sprintf("adstap-test-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=adstap-debug-0")

	const v1, v2 = "2026-11-30T09:00:00Z/41", "2026-11-30T09:00:05Z/42"
	const nodeA = "sidecar~10.0.0.1~reviews-v1-7f9c.default~default.svc.cluster.local"
	const nodeB = "sidecar~10.0.0.2~reviews-v2-5d8b.default~default.svc.cluster.local"
	const rejection = "Error adding/updating cluster(s) outbound|8080||svc-00003.ns-3.svc.cluster.local: unknown lb_policy"
	const rule = "/apis/networking.istio.io/v1/namespaces/ns-3/destination-rule/svc-00003-maglev"
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	var log syncbuf.Buffer
	tapAddr, _ := startTracedTap(t, cp.Addr(), &log, "--otlp-endpoint=http://"+j.OTLPGRPC, "--trace-scope=mesh-test")

	good := map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(3, 0)}
	bad := map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(4, 0)}
	maglev := bad[resource.ClusterType][3].(*clusterv3.Cluster)
	maglev.LbPolicy = clusterv3.Cluster_MAGLEV
	// Stamped as istiod stamps a cluster a DestinationRule shaped.
	maglev.Metadata.FilterMetadata["istio"].Fields["config"] = structpb.NewStringValue(rule)
	for _, n := range []string{nodeA, nodeB} {
		cp.SetSnapshot(t, n, v1, good)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan struct{}, 2)
	for _, n := range []string{nodeA, nodeB} {
		go func() {
			defer func() { done <- struct{}{} }()
			sotwClient(t, ctx, tapAddr, n, 2, func(r *discovery.DiscoveryResponse) string {
				if n == nodeA && r.VersionInfo == v2 {
					return rejection
				}
				return ""
			})
		}()
	}
	cp.WaitForRequest(t, 10*time.Second, func(r *discovery.DiscoveryRequest) bool { return r.VersionInfo == v1 && r.GetNode().GetId() == nodeB })
	cp.WaitForRequest(t, 10*time.Second, func(r *discovery.DiscoveryRequest) bool { return r.VersionInfo == v1 && r.GetNode().GetId() == nodeA })
	for _, n := range []string{nodeA, nodeB} {
		cp.SetSnapshot(t, n, v2, bad)
	}
	<-done
	<-done

	// One trace for v2, with both proxies' pushes in it.
	traces := j.WaitTraces(t, service, map[string]string{"xds.version": v2}, func(ts []jaegertest.Trace) bool {
		return len(ts) == 1 && len(ts[0].Spans) >= 2
	})
	tr := traces[0]
	if want := tracing.VersionTraceID("mesh-test", v2).String(); tr.TraceID != want {
		t.Errorf("v2's trace id = %s, want %s, derived from the scope and the version", tr.TraceID, want)
	}
	if len(tr.Warnings) > 0 {
		t.Errorf("Jaeger warns about the trace: %v", tr.Warnings)
	}
	byNode := map[string]jaegertest.Span{}
	for _, s := range tr.Spans {
		if len(s.Warnings) > 0 {
			t.Errorf("Jaeger warns about span %s: %v", s.OperationName, s.Warnings)
		}
		node, _ := s.Tag("xds.node.id")
		byNode[fmt.Sprint(node)] = s
	}
	if len(byNode) != 2 {
		t.Fatalf("v2's trace holds pushes of %d nodes, want 2: %s", len(byNode), tr)
	}
	nack, ack := byNode[nodeA], byNode[nodeB]
	for _, c := range []struct {
		span jaegertest.Span
		tags map[string]any
	}{
		{nack, map[string]any{
			"rpc.system.name": "grpc", "rpc.method": "envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
			"xds.type_url": resource.ClusterType, "xds.type": "cds", "xds.version": v2, "xds.node.cluster": "reviews",
			"xds.resources.count": int64(4), "xds.resources.added": int64(1), "xds.resources.changed": int64(0), "xds.full_sync": true,
			"xds.result": "nack", "otel.status_code": "ERROR", "otel.status_description": rejection, "error": true,
			"xds.error.source": "from DestinationRule ns-3/svc-00003-maglev",
		}},
		{ack, map[string]any{"xds.result": "ack", "xds.resources.count": int64(4), "xds.resources.added": int64(1)}},
	} {
		got := map[string]any{}
		for k := range c.tags {
			got[k], _ = c.span.Tag(k)
		}
		if diff := cmp.Diff(c.tags, got); diff != "" {
			t.Errorf("span %s tags (-want +got):\n%s", c.span.OperationName, diff)
		}
	}
	if objs, _ := nack.Tag("xds.error.istio_config"); !strings.Contains(fmt.Sprint(objs), rule) {
		t.Errorf("NACK span's xds.error.istio_config = %v, want it to hold %s", objs, rule)
	}
	if nack.OperationName != "CDS push" {
		t.Errorf("push span named %q, want \"CDS push\"", nack.OperationName)
	}
	if nonce, _ := nack.Tag("xds.nonce"); fmt.Sprint(nonce) == "" {
		t.Error("push span without xds.nonce")
	}
	// The push links to its stream's connect span, which has the phases.
	if len(nack.References) == 0 {
		t.Fatalf("push span has no link to its stream: %+v", nack)
	}
	// The connect span ends at the full sync, which settles a second after
	// the last ACK: wait for it.
	linked := nack.References[0].TraceID
	var connectTrace jaegertest.Trace
	xdstest.EventuallyWithin(t, 30*time.Second, "the connect trace in Jaeger", func() bool {
		for _, tr := range j.Traces(t, service, map[string]string{"xds.protocol": "sotw"}) {
			if tr.TraceID == linked && len(tr.Spans) >= 4 {
				connectTrace = tr
				return true
			}
		}
		return false
	})
	var ops []string
	for _, s := range connectTrace.Spans {
		ops = append(ops, s.OperationName)
	}
	sort.Strings(ops)
	if diff := cmp.Diff([]string{"connect", "first response", "full sync", "tcp"}, ops); diff != "" {
		t.Errorf("the stream's connect trace (-want +got):\n%s\n%s", diff, connectTrace)
	}
	if len(connectTrace.Warnings) > 0 {
		t.Errorf("Jaeger warns about the connect trace: %v", connectTrace.Warnings)
	}
	if !strings.Contains(fmt.Sprint(connectTrace.Processes), "adstap-debug-0") {
		t.Errorf("OTEL_RESOURCE_ATTRIBUTES did not reach the process: %v", connectTrace.Processes)
	}
}

// silentCollector accepts connections and never answers: the worst collector.
func silentCollector(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan []net.Conn)
	go func() {
		var conns []net.Conn
		for {
			c, err := lis.Accept()
			if err != nil {
				accepted <- conns
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		for _, c := range <-accepted {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// TestUnreachableCollectorsNeverTouchTheRelay: with the OTLP endpoint on a
// closed port, or on one that accepts and never answers, every push still
// arrives intact and the dropped-span counter rises.
func TestUnreachableCollectorsNeverTouchTheRelay(t *testing.T) {
	leakcheck.Check(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, tc := range []struct{ name, endpoint string }{
		{"closed port", closedAddr},
		{"silent collector", silentCollector(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := map[string][32]byte{}
			var mu = make(chan struct{}, 1)
			mu <- struct{}{}
			cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), xdstest.WithCallbacks(server.CallbackFuncs{
				StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
					<-mu
					sent[r.VersionInfo] = xdstest.MessageHash(r)
					mu <- struct{}{}
				},
			}))
			var log syncbuf.Buffer
			tapAddr, admin := startTracedTap(t, cp.Addr(), &log, "--otlp-endpoint=http://"+tc.endpoint)
			const node = "sidecar~10.0.0.9~app.default~default.svc.cluster.local"
			cp.SetSnapshot(t, node, "v0", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(2, 0)})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, tapAddr))
			s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.ClusterType})
			const pushes = 30
			for i := 0; i < pushes; i++ {
				r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
				<-mu
				want := sent[r.VersionInfo]
				mu <- struct{}{}
				if xdstest.MessageHash(r) != want {
					t.Fatalf("push %s arrived changed", r.VersionInfo)
				}
				s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
				if i < pushes-1 {
					cp.SetSnapshot(t, node, fmt.Sprintf("v%d", i+1), map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(2+i%3, 0)})
				}
			}
			// Spans pile up for an export that fails or never returns.
			xdstest.EventuallyWithin(t, 20*time.Second, "dropped spans counted", func() bool {
				text := scrape(t, admin)
				return value(t, text, `adstap_spans_dropped_total{reason="queue_full"}`)+value(t, text, `adstap_spans_dropped_total{reason="export_failed"}`) > 0
			})
			if !strings.Contains(log.String(), "spans dropped") {
				t.Errorf("no warning about dropped spans in the log")
			}
		})
	}
}

// TestSpansOverOTLPHTTPFromTheStandardVariables: no flag, only the standard
// OpenTelemetry variables, with the http/protobuf protocol and stream grouping.
func TestSpansOverOTLPHTTPFromTheStandardVariables(t *testing.T) {
	leakcheck.Check(t)
	j := jaegertest.Start(t)
	service := fmt.Sprintf("adstap-http-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+j.OTLPHTTP)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	var log syncbuf.Buffer
	tapAddr, _ := startTracedTap(t, cp.Addr(), &log, "--trace-grouping=stream")
	const node = "sidecar~10.0.0.3~details-v1.default~default.svc.cluster.local"
	cp.SetSnapshot(t, node, "1", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(2, 0)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sotwClient(t, ctx, tapAddr, node, 1, func(*discovery.DiscoveryResponse) string { return "" })

	// Stream grouping: the push is a child of its stream's connect span.
	traces := j.WaitTraces(t, service, map[string]string{"xds.node.id": node}, func(ts []jaegertest.Trace) bool {
		return len(ts) == 1 && len(ts[0].Spans) >= 5 // connect, tcp, first response, full sync, CDS push
	})
	var push, connect jaegertest.Span
	for _, s := range traces[0].Spans {
		switch s.OperationName {
		case "CDS push":
			push = s
		case "connect":
			connect = s
		}
	}
	if push.SpanID == "" || connect.SpanID == "" || push.ParentSpanID() != connect.SpanID {
		t.Errorf("want the CDS push under its stream's connect span:\n%s", traces[0])
	}
	if len(traces[0].Warnings) > 0 {
		t.Errorf("Jaeger warns: %v", traces[0].Warnings)
	}
}

// TestDetectorEpisodesAreSearchableSpans: a NACK storm shows in Jaeger as a
// span a user can find by its tag.
func TestDetectorEpisodesAreSearchableSpans(t *testing.T) {
	leakcheck.Check(t)
	j := jaegertest.Start(t)
	service := fmt.Sprintf("adstap-detect-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	var log syncbuf.Buffer
	tapAddr, _ := startTracedTap(t, cp.Addr(), &log, "--otlp-endpoint=http://"+j.OTLPGRPC)
	const node = "sidecar~10.0.0.4~ratings-v1.default~default.svc.cluster.local"
	cp.SetSnapshot(t, node, "2026-11-30T09:01:00Z/7", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(2, 0)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Five NACKs of the same push, re-sent by the snapshot cache each time.
	sotwClient(t, ctx, tapAddr, node, 5, func(*discovery.DiscoveryResponse) string { return "rejected: bad cluster" })

	traces := j.WaitTraces(t, service, map[string]string{"xds.detector": "nack_storm"}, func(ts []jaegertest.Trace) bool { return len(ts) > 0 })
	s := traces[0].Spans[0]
	if s.OperationName != "nack_storm started" {
		t.Errorf("detector span named %q, want \"nack_storm started\"", s.OperationName)
	}
	for k, want := range map[string]any{"xds.type": "cds", "xds.node.id": node, "xds.detector.count": int64(5)} {
		if got, _ := s.Tag(k); got != want {
			t.Errorf("detector span %s = %v, want %v", k, got, want)
		}
	}
}
