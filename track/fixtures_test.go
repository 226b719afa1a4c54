package track_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/track"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Frames in these tests are real go-control-plane messages, marshalled and
// decoded by codec, so the tracker sees exactly what the tap hands it.

const (
	lds   = codec.TypeListener
	rds   = codec.TypeRoute
	cds   = codec.TypeCluster
	eds   = codec.TypeEndpoint
	sds   = codec.TypeSecret
	syncz = codec.TypeSyncz

	adsSotW  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	adsDelta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

	sidecar = "sidecar~10.1.2.3~productpage-v1-6b746f74dc-9stvs.default~default.svc.cluster.local"
)

// t0 is when every test stream opens.
var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// ver is an istiod push version: the push time in RFC3339, "/", a counter.
func ver(n int) string { return fmt.Sprintf("2026-11-30T09:00:00Z/%d", n) }

// nonce is an istiod nonce: the push version followed by a UUID.
func nonce(n int) string {
	return ver(n) + fmt.Sprintf("%08x-6f1d-4c3b-9a2e-%012x", n*2654435761%(1<<32), n)
}

// envoyNode is what an Istio sidecar puts in the first request of a stream.
func envoyNode(id string) *corev3.Node {
	return &corev3.Node{
		Id:            id,
		Cluster:       "productpage.default",
		Locality:      &corev3.Locality{Region: "europe-west1", Zone: "europe-west1-b"},
		UserAgentName: "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 36, Patch: 2},
		}},
	}
}

// SotW requests, as Envoy sends them.

func initial(typeURL string, names ...string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names}
}

func withNode(r *discoveryv3.DiscoveryRequest, id string) *discoveryv3.DiscoveryRequest {
	r.Node = envoyNode(id)
	return r
}

func ack(typeURL string, n int, names ...string) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: ver(n), ResponseNonce: nonce(n), ResourceNames: names}
}

// nack rejects push n while, as Envoy does, reporting the last accepted
// version, which is not the rejected one.
func nack(typeURL string, n, accepted int, message string, names ...string) *discoveryv3.DiscoveryRequest {
	r := &discoveryv3.DiscoveryRequest{
		TypeUrl: typeURL, ResponseNonce: nonce(n), ResourceNames: names,
		ErrorDetail: &statuspb.Status{Code: 3, Message: message},
	}
	if accepted > 0 {
		r.VersionInfo = ver(accepted)
	}
	return r
}

// SotW responses, as istiod sends them.
func push(typeURL string, n int, resources ...proto.Message) *discoveryv3.DiscoveryResponse {
	r := &discoveryv3.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: ver(n), Nonce: nonce(n)}
	for _, m := range resources {
		r.Resources = append(r.Resources, mustAny(m))
	}
	return r
}

// Delta requests and responses.

func dinitial(typeURL string, subscribe ...string) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: subscribe}
}

func dack(typeURL string, n int) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: nonce(n)}
}

func dnack(typeURL string, n int, message string) *discoveryv3.DeltaDiscoveryRequest {
	return &discoveryv3.DeltaDiscoveryRequest{
		TypeUrl: typeURL, ResponseNonce: nonce(n), ErrorDetail: &statuspb.Status{Code: 3, Message: message},
	}
}

func dsub(typeURL string, n int, subscribe, unsubscribe []string) *discoveryv3.DeltaDiscoveryRequest {
	r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: subscribe, ResourceNamesUnsubscribe: unsubscribe}
	if n > 0 {
		r.ResponseNonce = nonce(n)
	}
	return r
}

func dpush(typeURL string, n int, removed []string, resources ...proto.Message) *discoveryv3.DeltaDiscoveryResponse {
	r := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, SystemVersionInfo: ver(n), Nonce: nonce(n), RemovedResources: removed}
	for _, m := range resources {
		r.Resources = append(r.Resources, &discoveryv3.Resource{Name: nameOf(m), Version: ver(n), Resource: mustAny(m)})
	}
	return r
}

func nameOf(m proto.Message) string {
	f := m.ProtoReflect().Descriptor().Fields().ByNumber(1)
	return m.ProtoReflect().Get(f).String()
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

// Resources shaped like istiod's. clusterV2 changes a cluster's content
// under the same name.

func cluster(name string) proto.Message {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			ResourceApiVersion:    corev3.ApiVersion_V3,
		}},
		ConnectTimeout: durationpb.New(10 * time.Second),
		LbPolicy:       clusterv3.Cluster_LEAST_REQUEST,
	}
}

func clusterV2(name string) proto.Message {
	c := cluster(name).(*clusterv3.Cluster)
	c.ConnectTimeout = durationpb.New(7 * time.Second)
	return c
}

func endpoint(name, ip string) proto.Message {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socket(ip, 9080)}},
		}}}},
	}
}

func listener(name string) proto.Message {
	return &listenerv3.Listener{Name: name, Address: socket("0.0.0.0", 15001)}
}

func route(name string) proto.Message {
	return &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
		Name: "reviews.default.svc.cluster.local:9080", Domains: []string{"reviews", "reviews.default.svc.cluster.local"},
	}}}
}

func socket(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// Istio resource names.
const (
	reviews = "outbound|9080||reviews.default.svc.cluster.local"
	ratings = "outbound|9080||ratings.default.svc.cluster.local"
	details = "outbound|9080||details.default.svc.cluster.local"
)

// A script is a sequence of calls and the events each must produce.
type step struct {
	at    time.Duration // since t0
	do    action
	want  []string
	check func(t *testing.T, tr *track.Tracker) // optional, after do
}

type action func(tb testing.TB, tr *track.Tracker, at time.Time) []track.Event

func open(id uint64, method string) action {
	return func(_ testing.TB, tr *track.Tracker, at time.Time) []track.Event {
		return tr.OpenStream(track.StreamMeta{ID: id, ConnID: 100 + id, Method: method, Peer: "10.1.2.3:41000", OpenedAt: at})
	}
}

// frame sends a request or response message of stream id through codec.
// Responses are decoded into one reused codec.Response and their buffer is
// scribbled over afterwards, so a tracker keeping views of it would fail.
func frame(id uint64, m proto.Message) action {
	return func(tb testing.TB, tr *track.Tracker, at time.Time) []track.Event {
		tb.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		switch m.(type) {
		case *discoveryv3.DiscoveryRequest, *discoveryv3.DeltaDiscoveryRequest:
			_, delta := m.(*discoveryv3.DeltaDiscoveryRequest)
			req, err := codec.DecodeRequest(b, delta)
			if err != nil {
				tb.Fatal(err)
			}
			return tr.Request(id, at, req, len(b))
		default:
			_, delta := m.(*discoveryv3.DeltaDiscoveryResponse)
			if err := sharedResponse.Decode(b, delta); err != nil {
				tb.Fatal(err)
			}
			evs := tr.Response(id, at, sharedResponse, len(b))
			for i := range b {
				b[i] = 0xff
			}
			sharedResponse.Reset()
			return evs
		}
	}
}

var sharedResponse = new(codec.Response)

func closeStream(id uint64, code uint32, message string) action {
	return func(_ testing.TB, tr *track.Tracker, at time.Time) []track.Event {
		return tr.CloseStream(id, at, code, message)
	}
}

// gap: skipped frames of stream id were relayed unobserved.
func gap(id uint64, skipped int) action {
	return func(_ testing.TB, tr *track.Tracker, at time.Time) []track.Event { return tr.Gap(id, at, skipped) }
}

func tick() action {
	return func(_ testing.TB, tr *track.Tracker, at time.Time) []track.Event { return tr.Tick(at) }
}

// run plays a script against tr, comparing every step's events but the
// FullPush ones.
func run(t *testing.T, tr *track.Tracker, steps []step) {
	t.Helper()
	play(t, tr, steps, false)
}

func play(t *testing.T, tr *track.Tracker, steps []step, rounds bool) {
	t.Helper()
	for i, st := range steps {
		if st.do != nil {
			got := describeAll(st.do(t, tr, t0.Add(st.at)), rounds)
			if diff := cmp.Diff(st.want, got); diff != "" {
				t.Fatalf("step %d (at %v): events (-want +got):\n%s", i, st.at, diff)
			}
		}
		if st.check != nil {
			st.check(t, tr)
		}
	}
}

// scenario is a script with the tracker config it runs under.
type scenario struct {
	name  string
	cfg   track.Config
	steps []step
}

func runScenarios(t *testing.T, scenarios []scenario) {
	t.Helper()
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { run(t, track.New(sc.cfg), sc.steps) })
	}
}

func describeAll(evs []track.Event, rounds bool) []string {
	var out []string
	for _, e := range evs {
		if _, ok := e.(track.FullPush); ok && !rounds {
			continue
		}
		out = append(out, describe(e))
	}
	return out
}

// describe renders an event as one line holding what the scripts check.
// Versions are shown by their istiod counter.
func describe(e track.Event) string {
	switch e := e.(type) {
	case track.StreamOpened:
		return fmt.Sprintf("open %d %s", e.Stream.ID, e.Stream.Protocol)
	case track.StreamClosed:
		return fmt.Sprintf("close %d code=%d %q node=%q", e.Stream.ID, e.Code, e.Message, e.Node.ID)
	case track.RequestSeen:
		s := fmt.Sprintf("req %d %s %s", e.StreamID, codec.ShortType(e.TypeURL), e.Kind)
		if e.SubscriptionChanged {
			s += " +sub"
		}
		return s
	case track.PushSent:
		return "push " + describePush(e.Push)
	case track.PushEnded:
		s := fmt.Sprintf("ended %d %s v=%s %s %v", e.Push.StreamID, e.Push.Type, short(e.Push.Version), e.Result, e.Latency)
		if e.Result == track.ResultNACK {
			s += fmt.Sprintf(" code=%d %q names=%v", e.ErrorCode, e.Error, e.ErrorNames)
		}
		return s
	case track.LateAnswer:
		return fmt.Sprintf("late %d %s v=%s %s %v", e.Push.StreamID, e.Push.Type, short(e.Push.Version), e.Result, e.Latency)
	case track.FullSyncComplete:
		var types []string
		for _, u := range e.Types {
			types = append(types, codec.ShortType(u))
		}
		return fmt.Sprintf("fullsync %d %v at=%v %v", e.StreamID, e.Elapsed, e.At.Sub(t0), types)
	case track.FullPush:
		return fmt.Sprintf("fullpush %d v=%s round=%d by=%s count=%d", e.StreamID, short(e.Version), e.Round, codec.ShortType(e.TypeURL), e.Count)
	case track.DecodeError:
		return fmt.Sprintf("decode-error %d %s: %v", e.StreamID, e.Direction, e.Err)
	case track.ObservationGap:
		return fmt.Sprintf("gap %d skipped=%d", e.StreamID, e.Skipped)
	case track.DetectorStarted:
		return fmt.Sprintf("start %s %q count=%d", e.Detector, e.Key, e.Count)
	case track.DetectorEnded:
		return fmt.Sprintf("end %s %q count=%d after %v", e.Detector, e.Key, e.Count, e.Duration)
	}
	return fmt.Sprintf("%T", e)
}

func describePush(p *track.Push) string {
	d := p.Diff
	s := fmt.Sprintf("%d %s v=%s res=%d +%d -%d ~%d =%d", p.StreamID, p.Type, short(p.Version), p.Resources,
		d.Added, d.Removed, d.Changed, d.Unchanged)
	for _, l := range []struct {
		sign  string
		names []string
	}{{"+", d.AddedNames}, {"-", d.RemovedNames}, {"~", d.ChangedNames}} {
		if len(l.names) > 0 {
			s += " " + l.sign + "[" + strings.Join(l.names, " ") + "]"
		}
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{p.FullSync, "full"}, {p.Initial, "initial"}, {p.Redundant, "redundant"}} {
		if f.on {
			s += " " + f.name
		}
	}
	return s
}

func short(version string) string { return strings.TrimPrefix(version, "2026-11-30T09:00:00Z/") }

// typeState returns one type of one stream from Streams.
func typeState(t *testing.T, tr *track.Tracker, id uint64, typeURL string) track.TypeState {
	t.Helper()
	for _, s := range tr.Streams("") {
		if s.ID == id {
			ts, ok := s.Types[typeURL]
			if !ok {
				t.Fatalf("stream %d has no type %s", id, typeURL)
			}
			return *ts
		}
	}
	t.Fatalf("no stream %d", id)
	return track.TypeState{}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return slices.Clip(out)
}

// wantType checks one type's state as Streams reports it, but for its short
// name and the times of its latest push, ACK and NACK (TestStreams checks those).
func wantType(id uint64, typeURL string, want track.TypeState) func(*testing.T, *track.Tracker) {
	return func(t *testing.T, tr *track.Tracker) {
		t.Helper()
		// What a NACK rejected is checked apart (keep_test.go): these
		// scripts give the tracker no bytes to keep.
		ignore := cmpopts.IgnoreFields(track.TypeState{}, "Type", "LastSentAt", "LastACKAt", "LastNACKAt", "LastRejected")
		if diff := cmp.Diff(want, typeState(t, tr, id, typeURL), ignore); diff != "" {
			t.Errorf("stream %d %s state (-want +got):\n%s", id, codec.ShortType(typeURL), diff)
		}
	}
}

const ms = time.Millisecond

// plus joins names for the Diff name lists of describe.
func plus(sign string, names ...string) string { return sign + "[" + strings.Join(names, " ") + "]" }

// decodedPush decodes a response into a codec.Response of its own, for
// callers that cannot share frame's.
func decodedPush(tb testing.TB, m *discoveryv3.DiscoveryResponse) *codec.Response {
	tb.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	resp := new(codec.Response)
	if err := resp.Decode(b, false); err != nil {
		tb.Fatal(err)
	}
	return resp
}
