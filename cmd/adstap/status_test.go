package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// istiodIdentifier is what istiod puts in control_plane.identifier.
const istiodIdentifier = `{"Component":"istiod","ID":"istiod-5d7c9d8d9b-x2x4k","Info":{"version":"1.28.1"}}`

// withIstiodIdentifier makes go-control-plane name itself in every response
// as istiod does. The response it hands the callback is the stream's own
// (go-control-plane sets the nonce on it the same way).
func withIstiodIdentifier() grpc.ServerOption {
	cp := &core.ControlPlane{Identifier: istiodIdentifier}
	return xdstest.WithCallbacks(server.CallbackFuncs{
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			r.ControlPlane = cp
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discovery.DeltaDiscoveryRequest, r *discovery.DeltaDiscoveryResponse) {
			r.ControlPlane = cp
		},
	})
}

// statusMesh is a running tap in front of go-control-plane with two proxies:
// grpc-go's xDS client (SotW), in sync, and an Istio sidecar's Delta stream
// (a raw ADS client sending a node with ISTIO_VERSION) that NACKs its clusters.
type statusMesh struct {
	admin         string
	good, nacking string // node ids
	rejection     string
}

func startStatusMesh(t *testing.T, flags ...string) statusMesh {
	t.Helper()
	m := statusMesh{
		good:      "proxyless~10.0.0.3~greeter-client-7d9f.demo~demo.svc.cluster.local",
		nacking:   "sidecar~10.0.0.4~reviews-v2-5d8b.demo~demo.svc.cluster.local",
		rejection: "Error adding/updating cluster(s) outbound|8080||svc-00001.ns-1.svc.cluster.local: unexpected lbPolicy MAGLEV",
	}
	backend := xdstest.StartBackend(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), withIstiodIdentifier())
	var log syncbuf.Buffer
	tapAddr, admin := startTracedTap(t, cp.Addr(), &log, flags...)
	m.admin = admin

	cp.SetSnapshot(t, m.good, "2026-11-30T09:00:00Z/1", xdsconfig.ResolverResources("greeter", backend))
	cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tapAddr, m.good)))
	cc.Connect()

	bad := map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(2, 0)}
	maglev := bad[resource.ClusterType][1].(*clusterv3.Cluster)
	maglev.LbPolicy = clusterv3.Cluster_MAGLEV
	// Stamped as istiod stamps a cluster a DestinationRule shaped.
	maglev.Metadata = xdsconfig.IstioConfig("destination-rule", "ns-1", "svc-00001-maglev")
	cp.SetSnapshot(t, m.nacking, "2026-11-30T09:00:00Z/7", bad)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Envoy sidecars speak Delta (Istio 1.22 on).
	s := xdstest.OpenDelta(t, ctx, xdstest.DialRaw(t, tapAddr))
	meta, err := structpb.NewStruct(map[string]any{"ISTIO_VERSION": "1.28.1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: m.nacking, Metadata: meta}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
	if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: m.rejection}}); err != nil {
		t.Fatal(err)
	}
	xdstest.Eventually(t, "the good proxy SYNCED and the other NACKED", func() bool {
		page := getStreams(t, admin, "")
		synced, nacked := 0, 0
		for _, s := range page.Streams {
			for _, ts := range s.Types {
				switch {
				case s.NodeID == m.good && ts.State == "SYNCED":
					synced++
				case s.NodeID == m.nacking && ts.State == "NACKED":
					nacked++
				}
			}
		}
		return synced == 4 && nacked == 1
	})
	return m
}

func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runCLI(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestStatusShowsProblemsFirstAndFailsOnANACK(t *testing.T) {
	leakcheck.Check(t)
	m := startStatusMesh(t, "--nack-storm-threshold=1")

	code, out, stderr := cli(t, "status", "--admin", m.admin)
	if code != exitOutOfSync {
		t.Errorf("exit status %d, want %d (a proxy is in ERROR); stderr %s", code, exitOutOfSync, stderr)
	}
	lines := strings.Split(out, "\n")
	header := regexp.MustCompile(`^NAME\s+CDS\s+LDS\s+EDS\s+RDS\s+CONTROL PLANE\s+VERSION$`)
	if !header.MatchString(lines[0]) {
		t.Errorf("header %q, want NAME CDS LDS EDS RDS CONTROL PLANE VERSION", lines[0])
	}
	rows := []*regexp.Regexp{
		// The NACKing sidecar first, by its pod.namespace, with istiod's pod and ISTIO_VERSION.
		regexp.MustCompile(`^reviews-v2-5d8b\.demo\s+ERROR \(\d+m?s\)\s+-\s+-\s+-\s+istiod-5d7c9d8d9b-x2x4k\s+1\.28\.1$`),
		regexp.MustCompile(`^greeter-client-7d9f\.demo\s+SYNCED \(\d+m?s\)\s+SYNCED \(\d+m?s\)\s+SYNCED \(\d+m?s\)\s+SYNCED \(\d+m?s\)\s+istiod-5d7c9d8d9b-x2x4k\s+gRPC Go/\S+$`),
	}
	for i, re := range rows {
		if i+1 >= len(lines) || !re.MatchString(lines[i+1]) {
			t.Errorf("row %d does not match %s:\n%s", i+1, re, out)
		}
	}
	wantProblem := "reviews-v2-5d8b.demo (stream "
	if !strings.Contains(out, "Problems:\n  "+wantProblem) || !strings.Contains(out, "cds: NACKED") ||
		!strings.Contains(out, "rejected 2026-11-30T09:00:00Z/7: "+m.rejection) {
		t.Errorf("no problem line with the NACK's version and message:\n%s", out)
	}
	if !strings.Contains(out, m.rejection+"\n    from DestinationRule ns-1/svc-00001-maglev\n      kubectl get destinationrule -n ns-1 svc-00001-maglev\n") {
		t.Errorf("the problem line is not followed by the DestinationRule to fix and its kubectl get:\n%s", out)
	}

	if !regexp.MustCompile(`(?m)^Active detectors:\n  NACK storm: stream \d+ cds, for \d+m?s \(1\)$`).MatchString(out) {
		t.Errorf("the NACK storm is not among the active detectors:\n%s", out)
	}

	// One node: the one in sync exits 0, without the other's problems.
	if code, out, _ := cli(t, "status", "--admin", m.admin, "--node", m.good); code != exitOK || strings.Contains(out, "reviews") || strings.Contains(out, "NACK storm") {
		t.Errorf("status --node %s: exit %d, want 0 and only that proxy:\n%s", m.good, code, out)
	}

	code, out, _ = cli(t, "status", "--admin", m.admin, "-o", "wide")
	if code != exitOutOfSync || !regexp.MustCompile(`(?m)^NAME\s+STREAM\s+PROTOCOL\s+PEER\s+CDS.*FULL SYNC$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^greeter-client-7d9f\.demo\s+\d+\s+sotw\s+127\.0\.0\.1:\d+\s+.*\s(-|\d+(\.\d+)?m?s)$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^reviews-v2-5d8b\.demo\s+\d+\s+delta\s+127\.0\.0\.1:\d+\s+ERROR`).MatchString(out) {
		t.Errorf("-o wide: exit %d, want stream, protocol, peer and time to full sync:\n%s", code, out)
	}

	code, out, _ = cli(t, "status", "--admin", m.admin, "-o", "json")
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if code != exitOutOfSync || rep.InSync || len(rep.Proxies) != 2 || rep.Proxies[0].NodeID != m.nacking ||
		rep.Proxies[0].Types["cds"].State != "ERROR" || rep.Proxies[1].Types["eds"].State != "SYNCED" {
		t.Errorf("-o json: exit %d, %+v", code, rep)
	}
	if src := rep.Proxies[0].Types["cds"].Source; src.Summary() != "from DestinationRule ns-1/svc-00001-maglev" {
		t.Errorf("-o json: the ERROR's source is %q", src.Summary())
	}
}

func TestStatusAndConfigErrors(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	var log syncbuf.Buffer
	_, admin := startTracedTap(t, cp.Addr(), &log)
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{"no streams", []string{"status", "--admin", admin}, exitOK, ""},
		{"bad output", []string{"status", "--admin", admin, "-o", "yaml"}, exitUsage, `-o "yaml"`},
		{"nothing listening", []string{"status", "--admin", "127.0.0.1:1"}, exitFailure, "is adstap running with --admin at 127.0.0.1:1?"},
		{"not an adstap", []string{"status", "--admin", cp.Addr()}, exitFailure, "127.0.0.1"},
		{"config without a type", []string{"config", "--admin", admin, "--stream", "1"}, exitUsage, "--type is required"},
		{"config with a bad type", []string{"config", "--admin", admin, "--stream", "1", "--type", "pods"}, exitUsage, `--type "pods"`},
		{"config with node and stream", []string{"config", "--admin", admin, "--stream", "1", "--node", "x", "--type", "cluster"}, exitUsage, "one of --node or --stream"},
		{"config of an unknown node", []string{"config", "--admin", admin, "--node", "nobody", "--type", "cluster"}, exitFailure, `no stream of node "nobody" has cds`},
		{"config without retention", []string{"config", "--admin", admin, "--stream", "1", "--type", "cluster"}, exitFailure, "start adstap with --retain-resources"},
		{"jaeger without prometheus", []string{"status", "--admin", admin, "--jaeger", "127.0.0.1:16685"}, exitUsage, "--jaeger needs --prometheus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := cli(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.wantErr) {
				t.Errorf("exit %d, stderr %q; want %d and %q (stdout %q)", code, stderr, tc.code, tc.wantErr, out)
			}
			if tc.code == exitOK && !strings.Contains(out, "No streams") {
				t.Errorf("stdout %q, want it to say there are no streams", out)
			}
		})
	}
}

// ADSTAP_JAEGER set for rollout does not break a tap's own status, which
// reads each NACK's message from the tap itself.
func TestStatusLeavesRolloutsJaegerFromTheEnvironment(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	var log syncbuf.Buffer
	_, admin := startTracedTap(t, cp.Addr(), &log)
	withEnv(t, map[string]string{"ADSTAP_JAEGER": "127.0.0.1:16685"})
	if code, out, stderr := cli(t, "status", "--admin", admin); code != exitOK || !strings.Contains(out, "No streams") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0 and no streams", code, out, stderr)
	}
}

func TestConfigShowsWhatAProxyAccepted(t *testing.T) {
	leakcheck.Check(t)
	m := startStatusMesh(t, "--retain-resources")
	code, out, stderr := cli(t, "config", "--admin", m.admin, "--node", m.good, "--type", "cluster")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^Stream \d+, cds version 2026-11-30T09:00:00Z/1: 1 resource$`,
		`(?m)^NAME\s+TYPE\s+LB POLICY\s+CONNECT TIMEOUT\s+STATUS$`,
		`(?m)^cluster-greeter\s+EDS\s+ROUND_ROBIN\s+\S+s\s+ACKED$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("config --type cluster lacks %s:\n%s", re, out)
		}
	}
	code, out, _ = cli(t, "config", "--admin", m.admin, "--node", m.good, "--type", "endpoint")
	if code != exitOK || !regexp.MustCompile(`(?m)^CLUSTER\s+ENDPOINTS\s+STATUS\n\S*greeter\S*\s+127\.0\.0\.1:\d+\s+ACKED$`).MatchString(out) {
		t.Errorf("config --type endpoint: exit %d:\n%s", code, out)
	}
	code, out, _ = cli(t, "config", "--admin", m.admin, "--node", m.good, "--type", "listener", "-o", "json")
	var page struct {
		Resources []map[string]any `json:"resources"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || code != exitOK || len(page.Resources) != 1 || page.Resources[0]["apiListener"] == nil {
		t.Errorf("config --type listener -o json: exit %d, %v:\n%s", code, err, out)
	}
	// The NACKing sidecar accepted nothing: its rejected clusters are not what it runs.
	code, out, _ = cli(t, "config", "--admin", m.admin, "--node", m.nacking, "--type", "cds")
	if code != exitOK || !strings.Contains(out, "cds version (none): 0 resources") {
		t.Errorf("config of a proxy that NACKed everything: exit %d:\n%s", code, out)
	}
}
