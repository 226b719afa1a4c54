package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/internal/rollout"
	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// rolloutFleet is twelve sidecar taps, each with its own proxy (a raw ADS
// client), sending spans to one Jaeger as a mesh's sidecars do: ten named
// by their pod (OTEL_RESOURCE_ATTRIBUTES), two by their node id. Every proxy
// gets v1, then v2, which changes a cluster the DestinationRule
// shop/reviews-maglev shaped; nacking proxies reject v2.
type rolloutFleet struct {
	jaeger  *jaegertest.Jaeger
	service string
	nacking map[string]string // proxy name → its NACK's message
}

const (
	fleetV1   = "2026-12-01T11:07:10Z/7"
	fleetV2   = "2026-12-01T11:07:12Z/8"
	fleetRule = "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews-maglev"
)

func startRolloutFleet(t *testing.T) rolloutFleet {
	t.Helper()
	j := jaegertest.Start(t)
	f := rolloutFleet{jaeger: j, service: fmt.Sprintf("adstap-rollout-%d", time.Now().UnixNano()), nacking: map[string]string{}}
	t.Setenv("OTEL_SERVICE_NAME", f.service)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))

	good := map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(3, 0)}
	bad := map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(4, 0)}
	maglev := bad[resource.ClusterType][3].(*clusterv3.Cluster)
	maglev.LbPolicy = clusterv3.Cluster_MAGLEV
	maglev.Metadata.FilterMetadata["istio"].Fields["config"] = structpb.NewStringValue(fleetRule)

	type proxy struct{ name, node, nack string }
	var proxies []proxy
	for i := range 12 {
		pod := fmt.Sprintf("reviews-%d", i)
		node := fmt.Sprintf("sidecar~10.0.0.%d~%s.shop~shop.svc.cluster.local", i+1, pod)
		p := proxy{name: pod + ".shop", node: node}
		attrs := "k8s.pod.name=" + pod + ",k8s.namespace.name=shop"
		if i >= 10 {
			p.name, attrs = node, "" // a tap without the template's attributes
		}
		if i == 3 || i == 11 {
			p.nack = fmt.Sprintf("Error adding/updating cluster(s) outbound|8080||svc-00003.ns-3.svc.cluster.local: unknown lb_policy (proxy %d)", i)
			f.nacking[p.name] = p.nack
		}
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", attrs)
		var log syncbuf.Buffer
		addr, _ := startTracedTap(t, cp.Addr(), &log, "--otlp-endpoint=http://"+j.OTLPGRPC, "--trace-scope=mesh-rollout")
		cp.SetSnapshot(t, node, fleetV1, good)
		proxies = append(proxies, proxy{name: p.name, node: node + "|" + addr, nack: p.nack})
	}
	// The streams stay open until the test ends: closed at once, a stream
	// could end before the tap saw its last ACK.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	done := make(chan struct{}, len(proxies))
	for _, p := range proxies {
		node, addr, _ := strings.Cut(p.node, "|")
		go func() {
			defer func() { done <- struct{}{} }()
			sotwClient(t, ctx, addr, node, 2, func(r *discovery.DiscoveryResponse) string {
				if r.VersionInfo == fleetV2 {
					return p.nack
				}
				return ""
			})
		}()
	}
	for _, p := range proxies {
		node, _, _ := strings.Cut(p.node, "|")
		cp.WaitForRequest(t, 10*time.Second, func(r *discovery.DiscoveryRequest) bool {
			return r.VersionInfo == fleetV1 && r.GetNode().GetId() == node
		})
	}
	for _, p := range proxies {
		node, _, _ := strings.Cut(p.node, "|")
		cp.SetSnapshot(t, node, fleetV2, bad)
	}
	for range proxies {
		<-done
	}
	return f
}

// rolloutCLI runs adstap rollout against the fleet's Jaeger.
func (f rolloutFleet) rolloutCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	args = append([]string{"rollout", "--jaeger=" + f.jaeger.QueryGRPC, "--service=" + f.service}, args...)
	code = runCLI(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestRolloutOfAFleetFromJaeger: twelve taps' spans in a real Jaeger; the
// round of v2 reached every proxy, two NACKed it. rollout counts them,
// names the NACKing ones with their messages and the DestinationRule,
// finds the round by the object it changed, and exits 3; the round of v1,
// which every proxy ACKed, exits 0.
func TestRolloutOfAFleetFromJaeger(t *testing.T) {
	leakcheck.Check(t)
	f := startRolloutFleet(t)

	var code int
	var out, errOut string
	// Spans reach Jaeger within a second or two of their push's end.
	xdstest.EventuallyWithin(t, 60*time.Second, "v2's round of twelve proxies in Jaeger", func() bool {
		code, out, errOut = f.rolloutCLI(fleetV2)
		return strings.Contains(out, "12 proxies reached")
	})
	t.Logf("adstap rollout %s:\n%s", fleetV2, out)
	if code != exitOutOfSync {
		t.Errorf("exit %d, want %d with two proxies NACKing; stderr %s", code, exitOutOfSync, errOut)
	}
	for _, want := range []string{
		"Push round " + fleetV2 + " (full push: cds)",
		"changed: destination-rule/shop/reviews-maglev",
		"12 proxies reached: 10 acked, 2 nacked, 0 waiting",
		"time to ACK: p50 ",
		"slowest to ACK: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rollout's output lacks %q:\n%s", want, out)
		}
	}
	for name, msg := range f.nacking {
		line := lineWith(out, name)
		if !strings.Contains(line, "NACKED") || !strings.Contains(line, msg) || !strings.Contains(line, "destination-rule/shop/reviews-maglev") {
			t.Errorf("the line of %s = %q, want NACKED, its message %q and the DestinationRule", name, line, msg)
		}
	}

	// The same as JSON, by the object the round changed.
	code, out, errOut = f.rolloutCLI("--object=DestinationRule/shop/reviews-maglev", "-o", "json")
	var rep rollout.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s%s", err, out, errOut)
	}
	if code != exitOutOfSync || len(rep.Rounds) != 1 || rep.Rounds[0].Version != fleetV2 || rep.Converged {
		t.Fatalf("--object: exit %d, rounds %+v, converged %v; want v2's round alone, not converged", code, rep.Rounds, rep.Converged)
	}
	r := rep.Rounds[0]
	if r.Reached != 12 || r.Counts[rollout.StateACKed] != 10 || r.Counts[rollout.StateNACKed] != 2 {
		t.Errorf("--object: %d reached, by state %v; want 12: 10 acked, 2 nacked", r.Reached, r.Counts)
	}
	for _, p := range r.Proxies[:2] {
		if p.State != rollout.StateNACKed || p.Message != f.nacking[p.Name] {
			t.Errorf("--object: proxy %+v, want one of the NACKing ones first, with its message", p)
		}
	}

	// Without VERSION: the latest full push, v2 (v1 answered requests).
	if code, out, errOut = f.rolloutCLI(); code != exitOutOfSync || !strings.Contains(out, "Push round "+fleetV2+" (full push") || strings.Contains(out, fleetV1) {
		t.Errorf("rollout without VERSION: exit %d, want v2's round alone:\n%s%s", code, out, errOut)
	}

	// Every proxy ACKed v1.
	code, out, errOut = f.rolloutCLI(fleetV1)
	if code != exitOK || !strings.Contains(out, "12 proxies reached: 12 acked, 0 nacked, 0 waiting") {
		t.Errorf("rollout %s: exit %d, want 0 with twelve ACKs:\n%s%s", fleetV1, code, out, errOut)
	}
}

// lineWith is the first line of s that holds sub.
func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestRolloutBadInput: each mistake is one line naming what was asked and
// what there is, exit 2 for usage and 1 for what cannot be found.
func TestRolloutBadInput(t *testing.T) {
	leakcheck.Check(t)
	j := jaegertest.Start(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := closed.Addr().String()
	closed.Close()
	// Some service in Jaeger: a tap that traced one push.
	service := fmt.Sprintf("adstap-bad-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	var log syncbuf.Buffer
	addr, _ := startTracedTap(t, cp.Addr(), &log, "--otlp-endpoint=http://"+j.OTLPGRPC)
	cp.SetSnapshot(t, "lonely", fleetV1, map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1, 0)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sotwClient(t, ctx, addr, "lonely", 1, func(*discovery.DiscoveryResponse) string { return "" })
	xdstest.EventuallyWithin(t, 60*time.Second, "the tap's push in Jaeger", func() bool {
		var out bytes.Buffer
		return runCLI(ctx, []string{"rollout", "--jaeger=" + j.QueryGRPC, "--service=" + service, fleetV1}, &out, &out) == exitOK
	})

	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"no jaeger", []string{}, exitUsage, []string{"--jaeger is required"}},
		{"jaeger not host:port", []string{"--jaeger=jaeger"}, exitUsage, []string{`--jaeger "jaeger"`, "host:port"}},
		{"version and object", []string{"--jaeger=" + j.QueryGRPC, fleetV1, "--object=destination-rule/shop/reviews"}, exitUsage, []string{"exclude each other"}},
		{"object not KIND/NS/NAME", []string{"--jaeger=" + j.QueryGRPC, "--object=reviews"}, exitUsage, []string{`--object "reviews"`, "KIND/NAMESPACE/NAME"}},
		{"bad output", []string{"--jaeger=" + j.QueryGRPC, "-o", "yaml"}, exitUsage, []string{`-o "yaml"`}},
		{"unreachable", []string{"--jaeger=" + dead, "--timeout=5s"}, exitFailure, []string{"Jaeger at " + dead + " cannot be reached"}},
		{"no such service", []string{"--jaeger=" + j.QueryGRPC, "--service=nobody"}, exitFailure, []string{`no spans of service "nobody"`, service}},
		{"no such version", []string{"--jaeger=" + j.QueryGRPC, "--service=" + service, "1999-01-01T00:00:00Z/1"}, exitFailure,
			[]string{`no push rounds of version "1999-01-01T00:00:00Z/1"`, "the latest push rounds: " + fleetV1}},
		{"no such object", []string{"--jaeger=" + j.QueryGRPC, "--service=" + service, "--object=virtual-service/shop/nope"}, exitFailure,
			[]string{"no push rounds that changed virtual-service/shop/nope", "the latest push rounds: " + fleetV1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := runCLI(ctx, append([]string{"rollout"}, tc.args...), &out, &errOut)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, errOut.String())
			}
			msg := errOut.String()
			if out.Len() > 0 || strings.Count(msg, "\n") != 1 {
				t.Errorf("want one line on stderr and nothing on stdout; got stdout %q, stderr %q", out.String(), msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr %q lacks %q", msg, w)
				}
			}
		})
	}
}
