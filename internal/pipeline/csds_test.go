package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	_ "google.golang.org/grpc/xds" // the xds:/// resolver, over the process's default xDS client pool
	"google.golang.org/grpc/xds/csds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promsum"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// csdsResource is what the ground-truth test compares of each resource.
type csdsResource struct {
	Status, Version, ErrorVersion, ErrorDetails string
}

func csdsResources(resp *statusv3.ClientStatusResponse, nodeID string) map[string]csdsResource {
	out := map[string]csdsResource{}
	for _, c := range resp.GetConfig() {
		if id := c.GetNode().GetId(); id != "" && id != nodeID {
			continue
		}
		for _, g := range c.GetGenericXdsConfigs() {
			out[g.GetTypeUrl()+" "+g.GetName()] = csdsResource{
				Status: g.GetClientStatus().String(), Version: g.GetVersionInfo(),
				ErrorVersion: g.GetErrorState().GetVersionInfo(), ErrorDetails: g.GetErrorState().GetDetails(),
			}
		}
	}
	return out
}

// TestCSDSMatchesTheClientsOwn puts gRPC's xDS client, which serves its own
// CSDS, behind a tap, and for each phase of a scenario — synced, the
// cluster NACKed, fixed, a route to a cluster the control plane never sends
// — wants the tap's CSDS answer for the node to equal the client's own,
// resource by resource: status, version, and the rejected version and its
// error.
func TestCSDSMatchesTheClientsOwn(t *testing.T) {
	leakcheck.Check(t)
	// The client's CSDS reads the process's default pool of xDS clients,
	// whose bootstrap file is named by the environment as the process
	// starts: the test runs again in a process of its own that has it.
	bootstrap := os.Getenv("GRPC_XDS_BOOTSTRAP")
	if bootstrap == "" {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCSDSMatchesTheClientsOwn$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "GRPC_XDS_BOOTSTRAP="+filepath.Join(t.TempDir(), "bootstrap.json"))
		out, err := cmd.CombinedOutput()
		t.Logf("the test in a process of its own:\n%s", out)
		if err != nil {
			t.Fatalf("the test in a process of its own: %v", err)
		}
		return
	}
	const nodeID = "csds-ground-truth"
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	backend := xdstest.StartBackend(t)
	dir, err := os.MkdirTemp("", "csds") // short: a socket's path has a bound
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	if err := os.WriteFile(bootstrap, xdstest.BootstrapJSON("unix://"+sock, nodeID), 0o600); err != nil {
		t.Fatal(err)
	}

	logs := &syncbuf.Buffer{}
	p, err := pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap: tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}},
		Observe: pipeline.Config{
			Logger:         slog.New(slog.NewTextHandler(logs, nil)),
			Version:        "test",
			RetainMaxBytes: 1 << 20,
			// gRPC's xDS client gives up on a resource after 15 s, as Envoy does by default.
			Detect: track.Config{InitialFetchTimeout: 15 * time.Second},
		},
		Listen:     tap.Address{Network: "unix", Addr: sock},
		CSDSListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatalf("pipeline.Start: %v", err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })

	csdsConn, err := grpc.NewClient(p.CSDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { csdsConn.Close() })
	tapCSDS := statusv3.NewClientStatusDiscoveryServiceClient(csdsConn)
	own, err := csds.NewClientStatusDiscoveryServer()
	if err != nil {
		t.Fatal(err)
	}
	byNode := &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{
		NodeId: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: nodeID}},
	}}}
	// same waits until the client's own CSDS says the phase has come
	// (its cluster named cluster has status and version), then wants the
	// tap's to equal it.
	same := func(phase string, within time.Duration, cluster string, want csdsResource) {
		t.Helper()
		var diff string
		ok := xdstest.Until(within, func() bool {
			want0, err := own.FetchClientStatus(t.Context(), &statusv3.ClientStatusRequest{})
			if err != nil {
				diff = err.Error()
				return false
			}
			if c := csdsResources(want0, nodeID)[resource.ClusterType+" "+cluster]; c.Status != want.Status || c.Version != want.Version || c.ErrorVersion != want.ErrorVersion {
				diff = "the client has not reached the phase: its cluster is " + fmt.Sprint(c)
				return false
			}
			want := want0
			got, err := tapCSDS.FetchClientStatus(t.Context(), byNode)
			if err != nil {
				diff = err.Error()
				return false
			}
			w := csdsResources(want, nodeID)
			diff = cmp.Diff(w, csdsResources(got, nodeID))
			return diff == "" && len(w) > 0
		})
		if !ok {
			t.Fatalf("%s: the tap's CSDS differs from the client's own (-client +tap):\n%s", phase, diff)
		}
		t.Logf("%s: the tap's CSDS equals the client's", phase)
	}

	res := xdsconfig.ResolverResources("svc", backend)
	cp.SetSnapshot(t, nodeID, "1", res)
	cc := xdstest.DialRaw(t, "xds:///svc")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("EmptyCall: %v", err)
	}
	same("synced", 10*time.Second, "cluster-svc", csdsResource{Status: "ACKED", Version: "1"})

	cp.SetSnapshot(t, nodeID, "2", xdsconfig.ResolverResourcesMaglev("svc", backend))
	same("the cluster NACKed", 10*time.Second, "cluster-svc", csdsResource{Status: "NACKED", Version: "1", ErrorVersion: "2"})

	cp.SetSnapshot(t, nodeID, "3", res)
	same("fixed", 10*time.Second, "cluster-svc", csdsResource{Status: "ACKED", Version: "3"})

	// The accepted resources, retained, are in xds_config, unless excluded.
	for _, exclude := range []bool{false, true} {
		req := proto.Clone(byNode).(*statusv3.ClientStatusRequest)
		req.ExcludeResourceContents = exclude
		var body *anypb.Any
		xdstest.Eventually(t, "the retained cluster in xds_config", func() bool {
			got, err := tapCSDS.FetchClientStatus(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range got.GetConfig()[0].GetGenericXdsConfigs() {
				if g.GetTypeUrl() == resource.ClusterType {
					body = g.GetXdsConfig()
				}
			}
			return exclude || body != nil
		})
		if exclude {
			if body != nil {
				t.Errorf("exclude_resource_contents: xds_config %v", body)
			}
			continue
		}
		var c clusterv3.Cluster
		if err := body.UnmarshalTo(&c); err != nil || c.GetName() != "cluster-svc" {
			t.Errorf("xds_config: cluster %q, %v", c.GetName(), err)
		}
	}

	// The route now names a cluster the control plane never sends: go-control-plane
	// does not answer a request for names it lacks, so both give up after 15 s.
	_, rName, _ := xdsconfig.ResolverNames("svc")
	broken := xdsconfig.ResolverResources("svc", backend)
	broken[resource.RouteType] = []types.Resource{xdsconfig.Route(rName, "svc", "cluster-never-sent")}
	cp.SetSnapshot(t, nodeID, "4", broken)
	same("a route to a cluster never sent", 30*time.Second, "cluster-never-sent", csdsResource{Status: "DOES_NOT_EXIST"})

	var found bool
	got, _ := tapCSDS.FetchClientStatus(t.Context(), byNode)
	for k, r := range csdsResources(got, nodeID) {
		if r.Status == "DOES_NOT_EXIST" && k == resource.ClusterType+" cluster-never-sent" {
			found = true
		}
	}
	if !found {
		t.Errorf("the cluster never sent is not DOES_NOT_EXIST in the tap's CSDS")
	}
	line := regexp.MustCompile(`CDS cluster-never-sent on stream 1 asked for 1[5-7]s ago and never sent: the proxy does not have it`)
	if !xdstest.Until(10*time.Second, func() bool { return line.MatchString(logs.String()) }) {
		t.Fatalf("no live log line %q in:\n%s", line, logs.String())
	}
	if n := strings.Count(logs.String(), "cluster-never-sent on stream 1 asked for"); n != 1 {
		t.Errorf("the finding was logged %d times, want once", n)
	}
	if got, err := promsum.Gathered(p.Metrics.Registry(), "adstap_resources_not_sent", map[string]string{"type": "cds"}); err != nil || got != 1 {
		t.Errorf("adstap_resources_not_sent{type=cds} = %v (%v), want 1", got, err)
	}
	cc.Close()
}

// TestCSDSRequests checks what a CSDS request can ask: node matchers
// (exact, prefix, none), bad and hostile matchers (a gRPC error, never a
// panic), and a stream of requests.
func TestCSDSRequests(t *testing.T) {
	leakcheck.Check(t)
	p, err := pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap:        tap.Config{Upstream: tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}},
		Listen:     loopback,
		CSDSListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatalf("pipeline.Start: %v", err)
	}
	defer p.Close(context.Background())
	for _, id := range []uint64{1, 2, 3} {
		node := []string{"", "sidecar~10.0.0.1~a.default~default.svc.cluster.local", "sidecar~10.0.0.2~b.default~default.svc.cluster.local", "router~10.0.0.3~gw.istio-system~istio-system.svc.cluster.local"}[id]
		p.Tracker.OpenStream(track.StreamMeta{ID: id, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"})
		p.Tracker.Request(id, time.Now(), decodedRequest(t, node, resource.ClusterType), 10)
	}
	conn, err := grpc.NewClient(p.CSDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := statusv3.NewClientStatusDiscoveryServiceClient(conn)
	sm := func(m *matcherv3.StringMatcher) *statusv3.ClientStatusRequest {
		return &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{NodeId: m}}}
	}
	tests := []struct {
		name     string
		req      *statusv3.ClientStatusRequest
		want     []string
		wantCode codes.Code
	}{
		{name: "every proxy", req: &statusv3.ClientStatusRequest{}, want: []string{"router~10.0.0.3~gw.istio-system~istio-system.svc.cluster.local", "sidecar~10.0.0.1~a.default~default.svc.cluster.local", "sidecar~10.0.0.2~b.default~default.svc.cluster.local"}},
		{name: "exact", req: sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "sidecar~10.0.0.2~b.default~default.svc.cluster.local"}}), want: []string{"sidecar~10.0.0.2~b.default~default.svc.cluster.local"}},
		{name: "prefix", req: sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "sidecar~"}}), want: []string{"sidecar~10.0.0.1~a.default~default.svc.cluster.local", "sidecar~10.0.0.2~b.default~default.svc.cluster.local"}},
		{name: "prefix, case ignored", req: sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "ROUTER"}, IgnoreCase: true}), want: []string{"router~10.0.0.3~gw.istio-system~istio-system.svc.cluster.local"}},
		{name: "regex", req: sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `.*\.default~.*`}}}), want: []string{"sidecar~10.0.0.1~a.default~default.svc.cluster.local", "sidecar~10.0.0.2~b.default~default.svc.cluster.local"}},
		{name: "no match", req: sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "nobody"}})},
		{name: "a bad regex", req: sm(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "("}}}), wantCode: codes.InvalidArgument},
		{name: "an empty matcher", req: sm(&matcherv3.StringMatcher{}), wantCode: codes.InvalidArgument},
		{name: "metadata matchers", req: &statusv3.ClientStatusRequest{NodeMatchers: []*matcherv3.NodeMatcher{{NodeMetadatas: []*matcherv3.StructMatcher{{}}}}}, wantCode: codes.InvalidArgument},
		{name: "too many matchers", req: &statusv3.ClientStatusRequest{NodeMatchers: make([]*matcherv3.NodeMatcher, 1000)}, wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client.FetchClientStatus(t.Context(), tt.req)
			if status.Code(err) != tt.wantCode {
				t.Fatalf("FetchClientStatus: %v, want code %v", err, tt.wantCode)
			}
			if err != nil {
				return
			}
			var got []string
			for _, c := range resp.GetConfig() {
				got = append(got, c.GetNode().GetId())
			}
			sort.Strings(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
	stream, err := client.StreamClientStatus(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := stream.Send(tests[i].req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := len(resp.GetConfig()); got != len(tests[i].want) {
			t.Errorf("stream answer %d: %d proxies, want %d", i, got, len(tests[i].want))
		}
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err == nil {
		t.Errorf("the stream went on after CloseSend")
	}

	// istioctl proxy-status's question, over ADS on the same listener.
	ads := xdstest.OpenSotW(t, t.Context(), conn)
	if err := ads.Send(&discovery.DiscoveryRequest{TypeUrl: codec.TypeSyncz, Node: &core.Node{Id: "istioctl"}}); err != nil {
		t.Fatal(err)
	}
	resp := xdstest.RecvWithin(t, 5*time.Second, ads.Recv)
	var ids []string
	for _, a := range resp.GetResources() {
		var cc statusv3.ClientConfig
		if err := a.UnmarshalTo(&cc); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cc.GetNode().GetId()+" "+cc.GetNode().GetMetadata().GetFields()["NAMESPACE"].GetStringValue())
		if len(cc.GetGenericXdsConfigs()) != 1 || cc.GetGenericXdsConfigs()[0].GetConfigStatus() != statusv3.ConfigStatus_NOT_SENT {
			t.Errorf("syncz: %s: %v, want CDS NOT_SENT", cc.GetNode().GetId(), cc.GetGenericXdsConfigs())
		}
	}
	sort.Strings(ids)
	if diff := cmp.Diff([]string{
		"router~10.0.0.3~gw.istio-system~istio-system.svc.cluster.local istio-system",
		"sidecar~10.0.0.1~a.default~default.svc.cluster.local default",
		"sidecar~10.0.0.2~b.default~default.svc.cluster.local default",
	}, ids); diff != "" || resp.GetControlPlane().GetIdentifier() == "" {
		t.Errorf("syncz: proxies (-want +got):\n%s\ncontrol plane %q", diff, resp.GetControlPlane().GetIdentifier())
	}
	if err := ads.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	if _, err := ads.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a CDS request on the CSDS listener: %v, want InvalidArgument", err)
	}
}

// decodedRequest is a node's first request for a type, as the observer decodes it.
func decodedRequest(t *testing.T, node, typeURL string) *codec.Request {
	t.Helper()
	b, err := proto.Marshal(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: typeURL})
	if err != nil {
		t.Fatal(err)
	}
	req, err := codec.DecodeRequest(b, false)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
