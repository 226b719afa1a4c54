// Package inspecttest records real capture files for the tests of adstap
// inspect: a real tap (tap.New with recorder.Recorder writing through
// capture.Writer, as adstap run --capture wires it) in front of a real
// go-control-plane server, driven by raw SotW clients through a scripted
// scenario whose every push, ACK and NACK is known.
package inspecttest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// The scenario's facts, for assertions.
const (
	// CDSNode runs the cluster script on stream 1.
	CDSNode = "sidecar~10.0.0.1~reviews-v1-7d9f.default~default.svc.cluster.local"
	// SDSNode gets one secret on stream 2.
	SDSNode = "sidecar~10.0.0.2~productpage-v1-5c8d.default~default.svc.cluster.local"

	Details     = "outbound|9080||details.default.svc.cluster.local"
	Productpage = "outbound|9080||productpage.default.svc.cluster.local"
	Reviews     = "outbound|9080||reviews.default.svc.cluster.local"        // connect_timeout 5s in v1, 7s from v2
	Ratings     = "outbound|9080||ratings.default.svc.cluster.local"        // added in v2
	Canary      = "outbound|9080||reviews-canary.default.svc.cluster.local" // MAGLEV in v3 (NACKed), fixed in v4
	// CanaryRule is the DestinationRule Canary's v3 records as its source.
	CanaryRule = "reviews-canary"

	SecretName = "default"

	// NACKs is how many times v3 is rejected.
	NACKs = 3
)

// NACKMessage is what the client says when it rejects v3, grpc-go style.
var NACKMessage = fmt.Sprintf(`error parsing "ClusterResource" response: resource %q: unexpected lbPolicy MAGLEV in response`, Canary)

// Scenario is a recorded capture.
type Scenario struct {
	Path string // the capture file (the newest, when it rotated)
	// CertPEM and KeyPEM are the workload certificate and its real private
	// key, pushed in the SDS secret; KeyPEM must never reach the capture.
	CertPEM, KeyPEM []byte
}

// Options change how the capture is written.
type Options struct {
	// MaxBytes and MaxFiles are the writer's rotation (zero: its defaults).
	MaxBytes int64
	MaxFiles int
	// BeforeClients is called once the capture file exists and the tap
	// is up, before any client connects.
	BeforeClients func()
}

const wait = 10 * time.Second

// Record runs the scenario and returns once the capture is closed:
//
//	stream 1 (CDSNode, CDS, wildcard):
//	  v1: Details, Productpage, Reviews                      ACK
//	  v2: Reviews' connect_timeout 5s → 7s, Ratings added    ACK
//	  v3: Canary added with lb_policy MAGLEV                 NACK ×3 (re-sent by go-control-plane after each NACK)
//	  v4: Canary with ROUND_ROBIN                            ACK
//	stream 2 (SDSNode, SDS ["default"]):
//	  v1: the secret, with a real private key                ACK
//
// then both clients cancel their streams.
func Record(t testing.TB, path string, opts Options) *Scenario {
	t.Helper()
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	tp := StartTap(t, path, cp.Addr(), opts)
	closed := tp.closed

	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "productpage", []string{"productpage.default.svc.cluster.local"}, nil, false)
	sc := &Scenario{Path: path, CertPEM: kp.CertPEM, KeyPEM: kp.KeyPEM}
	cc := xdstest.DialRaw(t, tp.Addr)

	// Stream 1: the cluster script.
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	s1 := xdstest.OpenSotW(t, ctx1, cc)
	clusters := func(version string) map[resource.Type][]types.Resource {
		reviews := xdsconfig.Cluster(Reviews, true)
		res := []types.Resource{xdsconfig.Cluster(Details, true), xdsconfig.Cluster(Productpage, true), reviews}
		if version == "v1" {
			return map[resource.Type][]types.Resource{resource.ClusterType: res}
		}
		reviews.ConnectTimeout = durationpb.New(7 * time.Second)
		res = append(res, xdsconfig.Cluster(Ratings, true))
		switch version {
		case "v3":
			canary := xdsconfig.Cluster(Canary, true)
			canary.LbPolicy = clusterv3.Cluster_MAGLEV
			canary.Metadata = xdsconfig.IstioConfig("destination-rule", "default", CanaryRule)
			res = append(res, canary)
		case "v4":
			res = append(res, xdsconfig.Cluster(Canary, true))
		}
		return map[resource.Type][]types.Resource{resource.ClusterType: res}
	}
	send := func(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, req *discovery.DiscoveryRequest) {
		t.Helper()
		if err := s.Send(req); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	recv := func(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, version string, n int) *discovery.DiscoveryResponse {
		t.Helper()
		r := xdstest.RecvWithin(t, wait, s.Recv)
		if r.GetVersionInfo() != version || len(r.GetResources()) != n {
			t.Fatalf("got version %q with %d resources, want %s with %d", r.GetVersionInfo(), len(r.GetResources()), version, n)
		}
		return r
	}
	ack := func(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, node, typ string, names []string, r *discovery.DiscoveryResponse) {
		t.Helper()
		send(s, &discovery.DiscoveryRequest{TypeUrl: typ, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		// go-control-plane's nonces count per stream ("1", "2", ...), and it
		// fills in the stream's node on every request it records.
		cp.WaitForRequest(t, wait, func(q *discovery.DiscoveryRequest) bool {
			return q.GetNode().GetId() == node && q.GetTypeUrl() == typ && q.GetResponseNonce() == r.GetNonce()
		})
	}
	nack := func(r *discovery.DiscoveryResponse) {
		t.Helper()
		send(s1, &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "v2", ResponseNonce: r.GetNonce(),
			ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: NACKMessage}})
	}

	cp.SetSnapshot(t, CDSNode, "v1", clusters("v1"))
	send(s1, &discovery.DiscoveryRequest{Node: &core.Node{Id: CDSNode, Cluster: "reviews.default"}, TypeUrl: resource.ClusterType})
	ack(s1, CDSNode, resource.ClusterType, nil, recv(s1, "v1", 3))
	cp.SetSnapshot(t, CDSNode, "v2", clusters("v2"))
	ack(s1, CDSNode, resource.ClusterType, nil, recv(s1, "v2", 4))
	cp.SetSnapshot(t, CDSNode, "v3", clusters("v3"))
	for i := 1; i <= NACKs; i++ {
		r := recv(s1, "v3", 5)
		if i == NACKs {
			// go-control-plane answers a NACK with the snapshot at once:
			// have the fix ready so the last NACK gets v4.
			cp.SetSnapshot(t, CDSNode, "v4", clusters("v4"))
		}
		nack(r)
	}
	ack(s1, CDSNode, resource.ClusterType, nil, recv(s1, "v4", 5))

	// Stream 2: one secret with a real private key.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	cp.SetSnapshot(t, SDSNode, "v1", map[resource.Type][]types.Resource{
		resource.SecretType: {xdsconfig.Secret(SecretName, kp.CertPEM, kp.KeyPEM)},
	})
	s2 := xdstest.OpenSotW(t, ctx2, cc)
	send(s2, &discovery.DiscoveryRequest{Node: &core.Node{Id: SDSNode, Cluster: "productpage.default"}, TypeUrl: resource.SecretType, ResourceNames: []string{SecretName}})
	ack(s2, SDSNode, resource.SecretType, []string{SecretName}, recv(s2, "v1", 1))

	for _, cancel := range []context.CancelFunc{cancel1, cancel2} {
		cancel()
		select {
		case <-closed:
		case <-time.After(wait):
			t.Fatal("the tap did not see a cancelled stream close")
		}
	}
	tp.Stop()
	return sc
}

// Tap is a real tap writing a capture, wired as adstap run --capture wires
// it, in front of an upstream.
type Tap struct {
	Addr    string // where clients connect, host:port
	closed  chan struct{}
	running *pipeline.Running
	t       testing.TB
	once    sync.Once
}

// StartTap starts a tap in front of upstream (host:port) capturing to
// path; it stops when the test ends, if Stop was not called first.
func StartTap(t testing.TB, path, upstream string, opts Options) *Tap {
	t.Helper()
	w, err := capture.NewWriter(path, opts.MaxBytes, opts.MaxFiles, "inspecttest", upstream)
	if err != nil {
		t.Fatal(err)
	}
	tp := &Tap{closed: make(chan struct{}, 64), t: t}
	// The capture as adstap run wires it; closing the tap writes out every
	// record it was handed.
	tp.running, err = pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap: tap.Config{Upstream: tap.Address{Network: "tcp", Addr: upstream}},
		Observe: pipeline.Config{Capture: w, Sinks: []track.Sink{track.SinkFunc(func(e track.Event) {
			if _, ok := e.(track.StreamClosed); ok {
				select {
				case tp.closed <- struct{}{}:
				default:
				}
			}
		})}},
		Listen: tap.Address{Network: "tcp", Addr: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tp.Addr = tp.running.Addr().Addr
	t.Cleanup(tp.Stop)
	if opts.BeforeClients != nil {
		opts.BeforeClients()
	}
	return tp
}

// Stop stops the tap and writes out the capture.
func (tp *Tap) Stop() {
	tp.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := tp.running.Close(ctx); err != nil {
			tp.t.Errorf("closing the capture: %v", err)
		}
		if err := tp.running.Err(); err != nil {
			tp.t.Errorf("tap: %v", err)
		}
	})
}
