package replay

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/goleak"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/internal/inspect"
	"github.com/adstap/adstap/internal/testutil/inspecttest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	grpcNode = "grpc-replay-node"
	// replayWait bounds a replay: grpc-go takes seconds to judge 1,000
	// clusters under the race detector on a busy machine, and a bisection
	// makes it judge ten sets.
	replayWait = 5 * time.Minute
)

// recordGRPC captures grpc-go's real xDS client for xds:///target through a
// real tap with capture on, in front of go-control-plane serving bad as
// v1. The client NACKs it, and the control plane heals at once with fixed
// as v2, which the client ACKs: a NACK gone by the time anyone looks. It
// returns the capture and the NACK's message.
func recordGRPC(t *testing.T, target string, bad, fixed map[resource.Type][]types.Resource) (path, nack string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "grpc.jsonl")
	var cp atomic.Pointer[xdstest.ControlPlane]
	var healed atomic.Bool
	nacks := make(chan string, 1)
	cp.Store(xdstest.StartControlPlane(t, xdstest.ListenTCP(t), xdstest.WithCallbacks(server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			// Before go-control-plane answers the NACK: it answers with v2.
			if r.GetTypeUrl() == resource.ClusterType && xdstest.IsNACK(r) && healed.CompareAndSwap(false, true) {
				if snap, err := cache.NewSnapshot("v2", fixed); err == nil {
					cp.Load().Cache().SetSnapshot(context.Background(), grpcNode, snap)
				}
				nacks <- r.GetErrorDetail().GetMessage()
			}
			return nil
		},
	})))
	tp := inspecttest.StartTap(t, path, cp.Load().Addr(), inspecttest.Options{})
	cp.Load().SetSnapshot(t, grpcNode, "v1", bad)
	cc := xdstest.DialRaw(t, "xds:///"+target, grpc.WithResolvers(xdstest.XDSResolver(t, tp.Addr, grpcNode)))
	cc.Connect()
	select {
	case nack = <-nacks:
	case <-time.After(replayWait):
		t.Fatal("grpc-go did not NACK v1")
	}
	cp.Load().WaitForRequest(t, replayWait, func(r *discovery.DiscoveryRequest) bool {
		return r.GetTypeUrl() == resource.ClusterType && r.GetVersionInfo() == "v2" && !xdstest.IsNACK(r)
	})
	cc.Close()
	tp.Stop()
	return path, nack
}

// replay serves sent on a loopback port, calls connect with its address,
// and returns what Serve returned and printed. A replay that does not end
// fails the test: it never hangs.
func replay(t *testing.T, sent *inspect.Sent, bisect string, connect func(addr string)) (*Outcome, string, error) {
	t.Helper()
	lis := xdstest.ListenTCP(t)
	var out syncbuf.Buffer
	type result struct {
		o   *Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		o, err := Serve(context.Background(), ServeConfig{Sent: sent, Listener: lis, Bisect: bisect, Settle: time.Second, AnswerTimeout: 2 * time.Minute, Out: &out})
		done <- result{o, err}
	}()
	connect(lis.Addr().String())
	select {
	case r := <-done:
		return r.o, out.String(), r.err
	case <-time.After(replayWait):
		t.Fatalf("the replay did not end within %s:\n%s", replayWait, out.String())
	}
	return nil, "", nil
}

func connectGRPC(t *testing.T, target string) func(string) {
	return func(addr string) {
		cc := xdstest.DialRaw(t, "xds:///"+target, grpc.WithResolvers(xdstest.XDSResolver(t, addr, grpcNode)))
		cc.Connect()
	}
}

// TestReplayReproducesGRPCGoNACK: grpc-go's xDS client rejected a MAGLEV
// cluster, and the control plane healed it a moment later. Replayed as of
// the rejected version to a new grpc-go client, the NACK comes back, word
// for word.
func TestReplayReproducesGRPCGoNACK(t *testing.T) {
	leakcheck.Check(t)
	backend := xdstest.StartBackend(t)
	path, captured := recordGRPC(t, "svc", xdsconfig.ResolverResourcesMaglev("svc", backend), xdsconfig.ResolverResources("svc", backend))

	latest, err := inspect.ReadSent(context.Background(), []string{path}, "", inspect.Point{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cds := latest.Type(resource.ClusterType); cds == nil || cds.Version != "v2" || cds.Result != "ack" {
		t.Fatalf("as of the end, CDS is %+v, want v2 ACKed", cds)
	}
	sent, err := inspect.ReadSent(context.Background(), []string{path}, grpcNode, inspect.Point{Version: "v1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cds := sent.Type(resource.ClusterType)
	if cds == nil || cds.Result != "nack" || cds.Error != captured || len(cds.Resources) != 1 {
		t.Fatalf("as of v1, CDS is %+v, want the NACKed cluster", cds)
	}

	o, out, err := replay(t, sent, "", connectGRPC(t, "svc"))
	t.Logf("replay:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Rejected) != 1 || o.Rejected[0].TypeURL != resource.ClusterType || o.Rejected[0].Message != captured {
		t.Fatalf("rejected %+v, want CDS with the captured message %q", o.Rejected, captured)
	}
	if !strings.Contains(out, "CDS v=v1 ") || !strings.Contains(out, " NACK ") || !strings.Contains(out, captured) {
		t.Errorf("the output has no NACK line with the captured message")
	}
	if !strings.Contains(captured, `unexpected lbPolicy MAGLEV`) {
		t.Errorf("grpc-go rejected MAGLEV with %q", captured)
	}
}

// TestReplayBisectsAThousandClustersToTheBadOne: a push of 1,000 clusters,
// one of them MAGLEV, which grpc-go rejects: --bisect cds pushes halves to
// the same client until the one it rejects alone, within ⌈log₂ 1000⌉ + 2
// rounds.
func TestReplayBisectsAThousandClustersToTheBadOne(t *testing.T) {
	leakcheck.Check(t)
	const n, badIndex = 1000, 617
	names := xdsconfig.ManyClusterNames("fleet", n)
	bad := xdsconfig.ManyClusterResources("fleet", n)
	bad[resource.ClusterType][badIndex].(*clusterv3.Cluster).LbPolicy = clusterv3.Cluster_MAGLEV
	path, captured := recordGRPC(t, "fleet", bad, xdsconfig.ManyClusterResources("fleet", n))

	sent, err := inspect.ReadSent(context.Background(), []string{path}, grpcNode, inspect.Point{Version: "v1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cds := sent.Type(resource.ClusterType); cds == nil || len(cds.Resources) != n || cds.Result != "nack" {
		t.Fatalf("as of v1, CDS is %d resources (%v), want the %d NACKed", len(cds.Resources), cds.Result, n)
	}
	o, out, err := replay(t, sent, "cds", connectGRPC(t, "fleet"))
	t.Logf("replay --bisect cds:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	b := o.Bisection
	if b == nil {
		t.Fatalf("no bisection; outcome %+v", o)
	}
	most := int(math.Ceil(math.Log2(n))) + 2
	if len(b.Culprit) != 1 || b.Culprit[0] != names[badIndex] || b.Of != n || b.Rounds > most || b.Inconsistent {
		t.Errorf("bisection %+v, want %s alone out of %d within %d rounds", b, names[badIndex], n, most)
	}
	if !strings.Contains(b.Message, names[badIndex]) || !strings.Contains(b.Message, "unexpected lbPolicy MAGLEV") {
		t.Errorf("the culprit's message %q is not grpc-go's words for it (captured: %q)", b.Message, captured)
	}
	if len(o.Rejected) != 1 {
		t.Errorf("rejected %+v, want CDS", o.Rejected)
	}
}

// rawClient is a SotW or Delta ADS stream of a client written out by hand,
// for what no real client does on demand (leave mid-bisection, ask for a
// type the capture does not have).
func rawSotW(t *testing.T, addr string) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, addr)), cancel
}

func scenarioSent(t *testing.T, node string, at inspect.Point) *inspect.Sent {
	t.Helper()
	sc := inspecttest.Record(t, filepath.Join(t.TempDir(), "capture.jsonl"), inspecttest.Options{})
	sent, err := inspect.ReadSent(context.Background(), []string{sc.Path}, node, at, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sent
}

func TestReplayEndsWithOneLineWhenTheClientLeavesMidBisection(t *testing.T) {
	leakcheck.Check(t)
	sent := scenarioSent(t, inspecttest.CDSNode, inspect.Point{Version: "v3"})
	_, out, err := replay(t, sent, "cds", func(addr string) {
		s, cancel := rawSotW(t, addr)
		if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: inspecttest.CDSNode}, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		push := xdstest.RecvWithin(t, replayWait, s.Recv)
		if len(push.GetResources()) != 5 {
			t.Fatalf("the replay pushed %d clusters, want the 5 of v3", len(push.GetResources()))
		}
		s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: push.GetNonce(),
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: inspecttest.NACKMessage}})
		round := xdstest.RecvWithin(t, replayWait, s.Recv)
		if len(round.GetResources()) != 3 {
			t.Fatalf("the first round pushed %d clusters, want 3 of 5", len(round.GetResources()))
		}
		cancel()
	})
	t.Logf("replay:\n%s", out)
	if err == nil || !errors.Is(err, errClient) || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "left during round 1 of the CDS bisection") || !strings.Contains(err.Error(), "among these 5 resources") {
		t.Errorf("err = %v, want one line saying the client left during round 1", err)
	}
}

func TestReplayRefusesAClientOfAnotherKind(t *testing.T) {
	leakcheck.Check(t)
	sent := scenarioSent(t, inspecttest.CDSNode, inspect.Point{})
	tests := []struct {
		name string
		req  *discovery.DiscoveryRequest
		want string
	}{{
		name: "a type the captured client never asked for",
		req:  &discovery.DiscoveryRequest{Node: &core.Node{Id: "router~10.0.0.9~gw"}, TypeUrl: resource.ListenerType},
		want: "the client asks for LDS, which the capture never sent node " + inspecttest.CDSNode + " (it sent CDS)",
	}, {
		name: "names the capture does not hold",
		req:  &discovery.DiscoveryRequest{Node: &core.Node{Id: "x"}, TypeUrl: resource.ClusterType, ResourceNames: []string{"cluster-other"}},
		want: `the client asks for CDS cluster-other; the capture sent node ` + inspecttest.CDSNode + " only",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := replay(t, sent, "", func(addr string) {
				s, _ := rawSotW(t, addr)
				if err := s.Send(tt.req); err != nil {
					t.Fatal(err)
				}
			})
			if !errors.As(err, new(*inspect.InputError)) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want an input error saying %q", err, tt.want)
			}
		})
	}
}

// TestReplayServesACaptureToADeltaClient: a SotW capture, served to a Delta
// client, in Delta envelopes around the same resource bytes.
func TestReplayServesACaptureToADeltaClient(t *testing.T) {
	leakcheck.Check(t)
	sent := scenarioSent(t, inspecttest.CDSNode, inspect.Point{Version: "v4"})
	o, out, err := replay(t, sent, "", func(addr string) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s := xdstest.OpenDelta(t, ctx, xdstest.DialRaw(t, addr))
		if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: inspecttest.CDSNode}, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		push := xdstest.RecvWithin(t, replayWait, s.Recv)
		for i, r := range push.GetResources() {
			want := sent.Type(resource.ClusterType).Resources[i]
			if r.GetName() != want.Name || !proto.Equal(r.GetResource(), mustAnyOf(t, want.Any)) {
				t.Errorf("resource %d is %s, want %s as captured", i, r.GetName(), want.Name)
			}
		}
		s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: push.GetNonce()})
	})
	t.Logf("replay:\n%s", out)
	if err != nil || len(o.Rejected) != 0 {
		t.Fatalf("outcome %+v, %v; want every push accepted", o, err)
	}
	if !strings.Contains(out, "the capture is SotW and this client speaks Delta") {
		t.Errorf("the replay does not say it serves a SotW capture in Delta")
	}
}

func TestReplaySaysWhichResourcesHadSecretsReplaced(t *testing.T) {
	leakcheck.Check(t)
	sent := scenarioSent(t, inspecttest.SDSNode, inspect.Point{})
	if got := redactedNames(sent); len(got) != 1 || got[0] != "SDS "+inspecttest.SecretName {
		t.Fatalf("Redacted() = %v, want the secret", got)
	}
	o, out, err := replay(t, sent, "", func(addr string) {
		s, _ := rawSotW(t, addr)
		s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: inspecttest.SDSNode}, TypeUrl: resource.SecretType, ResourceNames: []string{inspecttest.SecretName}})
		push := xdstest.RecvWithin(t, replayWait, s.Recv)
		s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{inspecttest.SecretName}, VersionInfo: push.GetVersionInfo(), ResponseNonce: push.GetNonce()})
	})
	if err != nil || len(o.Rejected) != 0 {
		t.Fatalf("outcome %+v, %v", o, err)
	}
	if !strings.Contains(out, "the capture replaced secrets in 1 resource") || !strings.Contains(out, "SDS "+inspecttest.SecretName) {
		t.Errorf("the replay does not say the secret was replaced:\n%s", out)
	}
}

func mustAnyOf(t *testing.T, b []byte) *anypb.Any {
	t.Helper()
	var a anypb.Any
	if err := proto.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

// TestReplayReportsAPushItCannotDecode: a captured resource the tap cannot
// decode is served as the capture has it, and the replay's log says the
// push did not decode rather than go on as if it had not been sent.
func TestReplayReportsAPushItCannotDecode(t *testing.T) {
	leakcheck.Check(t)
	sent := scenarioSent(t, inspecttest.CDSNode, inspect.Point{Version: "v3"})
	clusters := sent.Type(resource.ClusterType)
	clusters.Resources[0].Any = []byte{0x12, 0x05, 0x01} // an Any's value cut short
	_, out, err := replay(t, sent, "", func(addr string) {
		s, cancel := rawSotW(t, addr)
		defer cancel()
		if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: inspecttest.CDSNode}, TypeUrl: resource.ClusterType}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); err == nil {
			t.Error("the client decoded a push with a resource cut short")
		}
	})
	t.Logf("replay:\n%s", out)
	if !strings.Contains(out, "undecodable response") || !strings.Contains(out, "resources[0]") {
		t.Errorf("the replay's log does not report the push it could not decode")
	}
	if err == nil {
		t.Errorf("the replay ended without error, though the client left")
	}
}
