package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/adstap/adstap/internal/testutil/inspecttest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

func replayCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return subcommandCLI(t, "replay", args...)
}

func TestReplayBadInputExitsWith2AndOneLine(t *testing.T) {
	leakcheck.Check(t)
	sc := recordCapture(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no file", nil, nil, "adstap replay: name at least one capture FILE"},
		{"two points", nil, []string{"--at=v1", "--push=v1", sc.Path}, "--at, --push and --time exclude each other"},
		{"bad type", map[string]string{"ADSTAP_BISECT": "clusterz"}, []string{sc.Path}, `--bisect "clusterz"`},
		{"two nodes", nil, []string{sc.Path}, "pushed to 2 nodes; choose one with --node: " + inspecttest.CDSNode},
		{"no version", map[string]string{"ADSTAP_NODE": inspecttest.CDSNode}, []string{"--at=v7", sc.Path}, "the versions pushed to it: v1, v2, v3, v4"},
		{"missing file", nil, []string{sc.Path + ".nope"}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withEnv(t, tc.env)
			code, stdout, stderr := replayCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
				t.Errorf("status %d, stderr %q, stdout %q; want 2 and one line with %q", code, stderr, stdout, tc.want)
			}
		})
	}
}

// TestReplayPrintsAnEnvoyBootstrap: the bootstrap is one go-control-plane's
// Bootstrap type reads and validates, with the captured node and the
// replay as its ADS server.
func TestReplayPrintsAnEnvoyBootstrap(t *testing.T) {
	leakcheck.Check(t)
	sc := recordCapture(t)
	code, stdout, stderr := replayCLI(t, "--print-bootstrap", "--node="+inspecttest.CDSNode, "--listen=0.0.0.0:15999", sc.Path)
	if code != exitOK || stderr != "" {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	t.Logf("bootstrap:\n%s", stdout)
	js, err := yaml.YAMLToJSON([]byte(stdout))
	if err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("invalid bootstrap: %v", err)
	}
	if b.GetNode().GetId() != inspecttest.CDSNode || b.GetNode().GetCluster() != "reviews.default" {
		t.Errorf("node %v, want the captured one", b.GetNode())
	}
	ads := b.GetDynamicResources().GetAdsConfig()
	if ads.GetApiType() != core.ApiConfigSource_GRPC || ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != "xds-grpc" {
		t.Errorf("ADS config %v, want SotW gRPC to xds-grpc", ads)
	}
	c := b.GetStaticResources().GetClusters()[0]
	addr := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if c.GetName() != "xds-grpc" || addr.GetAddress() != "127.0.0.1" || addr.GetPortValue() != 15999 {
		t.Errorf("the ADS cluster %s points at %v, want 127.0.0.1:15999", c.GetName(), addr)
	}
}

// TestReplayExitStatusIsTheClientsAnswer: 3 when the client rejects the
// push, 0 when it takes it.
func TestReplayExitStatusIsTheClientsAnswer(t *testing.T) {
	leakcheck.Check(t)
	sc := recordCapture(t)
	for _, tc := range []struct {
		version string
		nack    bool
		want    int
	}{{"v3", true, exitNACK}, {"v4", false, exitOK}} {
		t.Run(tc.version, func(t *testing.T) {
			leakcheck.Check(t)
			var stdout, stderr syncbuf.Buffer
			done := make(chan int, 1)
			go func() {
				done <- runCLI(context.Background(), []string{"replay", "--listen=127.0.0.1:0", "--settle=100ms", "--node=" + inspecttest.CDSNode, "--at=" + tc.version, sc.Path}, &stdout, &stderr)
			}()
			serving := regexp.MustCompile(`serving ADS on (127\.0\.0\.1:\d+)`)
			xdstest.Eventually(t, "the replay listens", func() bool { return serving.MatchString(stdout.String()) })
			addr := serving.FindStringSubmatch(stdout.String())[1]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, addr))
			s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: inspecttest.CDSNode}, TypeUrl: resource.ClusterType})
			push := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
			answer := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: push.GetVersionInfo(), ResponseNonce: push.GetNonce()}
			if tc.nack {
				answer.VersionInfo = ""
				answer.ErrorDetail = &rpcstatus.Status{Code: 3, Message: inspecttest.NACKMessage}
			}
			s.Send(answer)
			select {
			case code := <-done:
				if code != tc.want {
					t.Errorf("status %d, want %d; stdout:\n%s\nstderr: %s", code, tc.want, stdout.String(), stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the replay did not end:\n%s", stdout.String())
			}
			if tc.nack && !strings.Contains(stdout.String(), "verdict: the client rejects CDS v=v3: "+inspecttest.NACKMessage+" — from DestinationRule default/"+inspecttest.CanaryRule) {
				t.Errorf("no verdict naming the DestinationRule:\n%s", stdout.String())
			}
		})
	}
}
