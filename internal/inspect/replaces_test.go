package inspect

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/internal/feed"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/refgraph"
	"github.com/adstap/adstap/track"
)

// named is a resource of typeURL named name.
func named(t *testing.T, typeURL, name string) *anypb.Any {
	t.Helper()
	var m proto.Message
	switch typeURL {
	case codec.TypeListener:
		m = &listenerv3.Listener{Name: name}
	case codec.TypeCluster:
		m = &clusterv3.Cluster{Name: name}
	case codec.TypeRoute:
		m = &routev3.RouteConfiguration{Name: name}
	case codec.TypeEndpoint:
		m = &endpointv3.ClusterLoadAssignment{ClusterName: name}
	case codec.TypeSecret:
		m = &tlsv3.Secret{Name: name}
	}
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestEveryoneAgreesWhatAPushReplaces: a client accepts a push of a and b,
// then one of a alone (no removal). Whether b is gone is one rule
// (codec.Replaces), and every part of the tap that follows what a client
// accepted must agree on it: the tracker (its diff of the second push), the
// reference check's graph, the retained configuration and inspect, each fed by
// the tracker's hand-over through the one decode-then-track step; and
// adstap replay's account of what the client was sent.
func TestEveryoneAgreesWhatAPushReplaces(t *testing.T) {
	leakcheck.Check(t)
	for _, tt := range []struct {
		name    string
		delta   bool
		typeURL string
		// names are what the client asks for; nil asks for nothing (the
		// type is pushed unrequested, and acknowledged with no names).
		names []string
		want  bool // the second push replaces the type: b is gone
	}{
		{"SotW wildcard LDS", false, codec.TypeListener, []string{}, true},
		{"SotW wildcard CDS", false, codec.TypeCluster, []string{}, true},
		{"SotW CDS asked for by name", false, codec.TypeCluster, []string{"a", "b"}, true},
		{"SotW RDS asked for by name", false, codec.TypeRoute, []string{"a", "b"}, false},
		{"SotW EDS asked for by name", false, codec.TypeEndpoint, []string{"a", "b"}, false},
		{"SotW SDS asked for by name", false, codec.TypeSecret, []string{"a", "b"}, false},
		{"SotW RDS wildcard", false, codec.TypeRoute, []string{"*"}, true},
		{"SotW EDS pushed unrequested", false, codec.TypeEndpoint, nil, true},
		{"Delta wildcard CDS", true, codec.TypeCluster, []string{"*"}, false},
		{"Delta LDS asked for by name", true, codec.TypeListener, []string{"a", "b"}, false},
		{"Delta EDS asked for by name", true, codec.TypeEndpoint, []string{"a", "b"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := codec.Replaces(tt.delta, tt.typeURL, len(tt.names) == 0 || tt.names[0] == "*", tt.names != nil); got != tt.want {
				t.Fatalf("codec.Replaces = %v, want %v", got, tt.want)
			}
			// After an ACK the second push is handed over as what it
			// changed (Accepted.Partial); after a push superseded
			// unanswered, whole (Accepted.Replace).
			for _, superseded := range []bool{false, true} {
				got := acceptTwice(t, tt.delta, tt.typeURL, tt.names, superseded)
				for who, holds := range got {
					if gone := !holds; gone != tt.want {
						t.Errorf("superseded=%v: %s: b gone = %v, want %v", superseded, who, gone, tt.want)
					}
				}
			}
		})
	}
}

// acceptTwice has a client accept a push of a and b of typeURL, then one
// of a alone, and returns whether each follower still holds b. With
// superseded, a push of a, b and c goes unanswered between the two.
func acceptTwice(t *testing.T, delta bool, typeURL string, names []string, superseded bool) map[string]bool {
	t.Helper()
	tr := track.New(track.Config{})
	store := retained.New(retained.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.DiscardHandler)}, MaxBytes: 1 << 20})
	defer store.Close(context.Background())
	store.Take(tr)
	pushes := newPushes("none", true)
	pushes.take(tr)
	sent := &sentCollector{byNonce: map[nonceKey]*sentPush{}, rawNode: map[string][]byte{}, pushed: map[string]bool{}, asked: map[string][]string{}, named: map[uint64]bool{}}
	refs := references.New(references.Config{})
	defer refs.Close(context.Background())
	refs.Take(tr)

	method, proto_ := "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", codec.SotW
	if delta {
		method, proto_ = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources", codec.Delta
	}
	at := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	var resp codec.Response
	var removed int // the tracker's diff of the second push
	send := func(response bool, m proto.Message) {
		t.Helper()
		at = at.Add(time.Second)
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		evs, d := feed.Track(tr, &resp, feed.Frame{Stream: 1, At: at, Response: response, Delta: delta, Data: mem.BufferSlice{mem.SliceBuffer(b)}, Size: len(b)})
		if d.Err != nil {
			t.Fatal(d.Err)
		}
		for _, e := range evs {
			store.OnEvent(e)
			refs.OnEvent(e)
			if e, ok := e.(track.PushSent); ok {
				removed = e.Push.Diff.Removed
			}
		}
		pushes.events(&step{At: at}, evs)
		sent.events(&step{At: at, Rec: &capture.Record{Message: b}, Req: d.Request, Resp: d.Response, Delta: delta}, evs)
	}
	request := func(nonce string, names []string) proto.Message {
		if delta {
			return &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: nonce, ResourceNamesSubscribe: names}
		}
		return &discovery.DiscoveryRequest{TypeUrl: typeURL, ResponseNonce: nonce, ResourceNames: names}
	}
	push := func(version string, names ...string) proto.Message {
		if delta {
			m := &discovery.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: version, SystemVersionInfo: version}
			for _, n := range names {
				m.Resources = append(m.Resources, &discovery.Resource{Name: n, Version: version, Resource: named(t, typeURL, n)})
			}
			return m
		}
		m := &discovery.DiscoveryResponse{TypeUrl: typeURL, Nonce: version, VersionInfo: version}
		for _, n := range names {
			m.Resources = append(m.Resources, named(t, typeURL, n))
		}
		return m
	}
	ack := func(version string) proto.Message {
		if delta {
			return &discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: version}
		}
		return &discovery.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: version, ResponseNonce: version, ResourceNames: names}
	}

	for _, e := range tr.OpenStream(track.StreamMeta{ID: 1, ConnID: 1, Method: method, Protocol: proto_, OpenedAt: at}) {
		store.OnEvent(e)
		refs.OnEvent(e)
		pushes.events(&step{At: at}, []track.Event{e})
	}
	if names != nil {
		send(false, request("", names))
	}
	send(true, push("1", "a", "b"))
	send(false, ack("1"))
	if superseded {
		send(true, push("s", "a", "b", "c"))
	}
	send(true, push("2", "a"))
	send(false, ack("2"))

	held := map[string]bool{"the tracker": removed == 0}
	if refgraph.Reads(typeURL) {
		held["the reference check"] = refs.Holds(context.Background(), 1, typeURL, "b")
		if !refs.Holds(context.Background(), 1, typeURL, "a") {
			t.Fatalf("the reference check's graph lacks a")
		}
	}
	t_ := pushes.tracks[pushKey{1, typeURL}]
	if t_ == nil || t_.acked["a"].value == nil {
		t.Fatalf("inspect holds nothing of what the client accepted")
	}
	_, held["inspect"] = t_.acked["b"]
	held["the retained configuration"] = retains(t, store, typeURL, "b")
	s, err := sent.sent(Point{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	held["replay's account of what was sent"] = slices.ContainsFunc(s.Type(typeURL).Resources, func(r SentResource) bool { return r.Name == "b" })
	if !retains(t, store, typeURL, "a") {
		t.Fatalf("the retained configuration lacks a")
	}
	for _, e := range tr.CloseStream(1, at, 0, "") {
		store.OnEvent(e)
		refs.OnEvent(e)
	}
	return held
}

// retains reports whether /debug/config shows a resource named name of
// stream 1.
func retains(t *testing.T, store *retained.Store, typeURL, name string) bool {
	t.Helper()
	rec := httptest.NewRecorder()
	store.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/config?stream=1&type="+typeURL, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/debug/config: %d %s", rec.Code, rec.Body.String())
	}
	var p retained.Page
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Resources {
		var named struct {
			Name        string `json:"name"`
			ClusterName string `json:"clusterName"`
		}
		if err := json.Unmarshal(r, &named); err != nil {
			t.Fatal(err)
		}
		if named.Name == name || named.ClusterName == name {
			return true
		}
	}
	return false
}
