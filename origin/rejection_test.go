package origin_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// response marshals a SotW response of clusters and any extra resources, as
// the tap would hand it over.
func response(t *testing.T, clusters []*clusterv3.Cluster, extra ...*anypb.Any) mem.BufferSlice {
	t.Helper()
	return responseN(t, 1, clusters, extra...)
}

// responseN is response as version n, nonce "n<n>".
func responseN(t *testing.T, n int, clusters []*clusterv3.Cluster, extra ...*anypb.Any) mem.BufferSlice {
	t.Helper()
	r := &discoveryv3.DiscoveryResponse{TypeUrl: clusterType, VersionInfo: fmt.Sprint(n), Nonce: fmt.Sprint("n", n)}
	for _, c := range clusters {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		r.Resources = append(r.Resources, a)
	}
	r.Resources = append(r.Resources, extra...)
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// rejectedBy pushes data through a tracker and NACKs it with message, as a
// client naming names would: the tracker's Rejected, for origin.Of to read.
// released says whether the tracker let go of the bytes.
func rejectedBy(t *testing.T, data mem.BufferSlice, message string) (r *track.Rejected, released func() bool) {
	t.Helper()
	tr := track.New(track.Config{})
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	tr.OpenStream(track.StreamMeta{ID: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", OpenedAt: at})
	tr.Request(1, at, &codec.Request{TypeURL: clusterType}, 10)
	var resp codec.Response
	if err := resp.DecodeBuffers(data, false); err != nil {
		t.Fatal(err)
	}
	tr.ResponseFrame(1, at, &resp, data.Len(), data)
	for _, e := range tr.Request(1, at, &codec.Request{TypeURL: clusterType, ResponseNonce: "n1", ErrorDetail: &codec.ErrorDetail{Code: 3, Message: message}}, 10) {
		if e, ok := e.(track.PushEnded); ok && e.Rejected != nil {
			return e.Rejected, func() bool { return tr.Kept().Bytes == 0 }
		}
	}
	t.Fatal("the tracker saw no NACK")
	return nil, nil
}

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// stamped is a cluster istiod built from the DestinationRule shop/rule.
func stamped(name, rule string) *clusterv3.Cluster {
	c := xdsconfig.Cluster(name, true)
	c.Metadata = xdsconfig.IstioConfig("destination-rule", "shop", rule)
	return c
}

func rejected(t *testing.T, data mem.BufferSlice, message string) *track.Rejected {
	t.Helper()
	r, _ := rejectedBy(t, data, message)
	return r
}

func TestSummary(t *testing.T) {
	leakcheck.Check(t)
	var many []*clusterv3.Cluster
	for i := range 5 {
		many = append(many, stamped(fmt.Sprintf("c%d", i), fmt.Sprintf("r%d", i)))
	}
	// A resource of a type this build does not know, named u, which may
	// record an object (its bytes hold a path): it cannot be opened. One
	// without a path is known to record none, opened or not.
	body := protowire.AppendTag(nil, 1, protowire.BytesType)
	body = protowire.AppendString(body, "u")
	body = protowire.AppendTag(body, 2, protowire.BytesType)
	body = protowire.AppendString(body, "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/u")
	unknown := &anypb.Any{TypeUrl: "type.googleapis.com/example.Unknown", Value: body}
	plain := &anypb.Any{TypeUrl: "type.googleapis.com/example.Unknown", Value: []byte{0x0a, 0x01, 'v'}}
	// A name that is not UTF-8, as the wire allows: what the outputs show
	// must be (a span with such a string is dropped by the exporter).
	notUTF8 := &anypb.Any{TypeUrl: "type.googleapis.com/example.Unknown", Value: protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "bad-\xc3\x28")}
	tests := []struct {
		name  string
		r     *track.Rejected
		want  string
		error bool
	}{
		{name: "none", r: nil, want: ""},
		{name: "five objects, whole push", r: rejected(t, response(t, many), "bad"),
			want: "the message names no resource; the push comes from DestinationRule shop/r0, DestinationRule shop/r1, DestinationRule shop/r2 and 2 more"},
		{name: "two named", r: rejected(t, response(t, many), "c1 and c3 are bad"),
			want: "from one of DestinationRule shop/r1, DestinationRule shop/r3"},
		{name: "named, none recorded", r: rejected(t, response(t, []*clusterv3.Cluster{xdsconfig.Cluster("alpha", true), xdsconfig.Cluster("beta", true)}), "alpha, beta"),
			want: "no Istio config recorded in the 2 resources the message names"},
		{name: "whole push, none recorded", r: rejected(t, response(t, []*clusterv3.Cluster{xdsconfig.Cluster("alpha", true), xdsconfig.Cluster("beta", true)}), "bad"),
			want: "no Istio config recorded in any of the 2 pushed resources"},
		{name: "a type adstap cannot open", r: rejected(t, response(t, nil, unknown), "u is bad"),
			want: `Istio source unknown: resource "u": `, error: true},
		{name: "a type adstap cannot open, without a path", r: rejected(t, response(t, nil, plain), "v is bad"),
			want: "no Istio config recorded in v"},
		{name: "a name that is not UTF-8", r: rejected(t, response(t, nil, notUTF8), "bad"),
			want: "no Istio config recorded in bad-\uFFFD("},
		{name: "not kept", r: &track.Rejected{NotKept: "no room"}, want: "Istio source unknown: the rejected push was not kept: no room", error: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := origin.Of(tt.r)
			got := x.Summary()
			if tt.error && !strings.HasPrefix(got, tt.want) || !tt.error && got != tt.want {
				t.Errorf("Summary() = %q, want %q", got, tt.want)
			}
			if _, err := x.Resources(); (err != nil) != tt.error {
				t.Errorf("Resources() error = %v, want error %v", err, tt.error)
			}
		})
	}
}

func TestDecodedOnceAndReleased(t *testing.T) {
	leakcheck.Check(t)
	rej, released := rejectedBy(t, response(t, []*clusterv3.Cluster{stamped("c", "reviews")}), `resource "c": bad`)
	if released() {
		t.Fatal("the push was let go of before anyone read it")
	}
	r := origin.Of(rej)
	for range 3 {
		if again := origin.Of(rej); again != r {
			t.Fatal("a second read decoded the push again")
		}
		if got := r.Summary(); got != "from DestinationRule shop/reviews" {
			t.Fatalf("Summary() = %q", got)
		}
	}
	if !released() {
		t.Error("the push is still kept after it was read")
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"resources":[{"name":"c","istio_config":[{"kind":"DestinationRule","namespace":"shop","name":"reviews",` +
		`"path":"/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews","kubectl":"kubectl get destinationrule -n shop reviews"}]}],` +
		`"summary":"from DestinationRule shop/reviews"}`
	if string(b) != want {
		t.Errorf("JSON:\n got %s\nwant %s", b, want)
	}

	// A client of /debug/streams reads back what the tap said.
	var back origin.Rejection
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Summary(); got != "from DestinationRule shop/reviews" {
		t.Errorf("read back, Summary() = %q", got)
	}
	if objs := back.Objects(); len(objs) != 1 || objs[0].Kubectl() != "kubectl get destinationrule -n shop reviews" {
		t.Errorf("read back, Objects() = %+v", objs)
	}
	if again, _ := json.Marshal(&back); string(again) != want {
		t.Errorf("read back and written again:\n got %s\nwant %s", again, want)
	}
}

// rejectedChange pushes first, ACKs it, then pushes second and NACKs it
// with message: the tracker's Rejected of second, for origin.Of to read.
func rejectedChange(t *testing.T, first, second []*clusterv3.Cluster, message string) *track.Rejected {
	t.Helper()
	tr := track.New(track.Config{})
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	tr.OpenStream(track.StreamMeta{ID: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources", OpenedAt: at})
	tr.Request(1, at, &codec.Request{TypeURL: clusterType}, 10)
	for n, clusters := range [][]*clusterv3.Cluster{first, second} {
		data := responseN(t, n+1, clusters)
		var resp codec.Response
		if err := resp.DecodeBuffers(data, false); err != nil {
			t.Fatal(err)
		}
		tr.ResponseFrame(1, at, &resp, data.Len(), data)
		if n == 0 {
			tr.Request(1, at, &codec.Request{TypeURL: clusterType, VersionInfo: "1", ResponseNonce: "n1"}, 10)
		}
	}
	for _, e := range tr.Request(1, at, &codec.Request{TypeURL: clusterType, ResponseNonce: "n2", ErrorDetail: &codec.ErrorDetail{Code: 3, Message: message}}, 10) {
		if e, ok := e.(track.PushEnded); ok && e.Rejected != nil {
			return e.Rejected
		}
	}
	t.Fatal("the tracker saw no NACK")
	return nil
}

// A NACK rejects what the push changed: the outputs say which resources
// the message names are no culprit, and that a message naming none
// suspects only what changed.
func TestOnlyChangedSuspected(t *testing.T) {
	leakcheck.Check(t)
	var v1, v2 []*clusterv3.Cluster
	for i := range 8 {
		name, rule := fmt.Sprintf("cluster-%d", i), fmt.Sprintf("rule-%d", i)
		v1 = append(v1, stamped(name, rule))
		if i == 2 {
			rule += "b" // the change, whose rule the client rejects
		}
		v2 = append(v2, stamped(name, rule))
	}
	plain := func(timeout int64) []*clusterv3.Cluster {
		var out []*clusterv3.Cluster
		for _, name := range []string{"alpha", "beta", "gamma", "delta", "epsilon"} {
			c := xdsconfig.Cluster(name, true)
			if name == "beta" {
				c.ConnectTimeout = durationpb.New(time.Duration(timeout) * time.Second)
			}
			out = append(out, c)
		}
		return out
	}
	const note = "unchanged since the last accepted version: not what was rejected"
	tests := []struct {
		name          string
		first, second []*clusterv3.Cluster
		message       string
		summary       string
		objects       []string
		json          string // the resources of MarshalJSON and what follows them
	}{{
		name: "naming the changed resource", first: v1, second: v2, message: "cluster-2: bad",
		summary: "from DestinationRule shop/rule-2b",
		objects: []string{"DestinationRule shop/rule-2b"},
		json:    `[{"name":"cluster-2","istio_config":[{"kind":"DestinationRule","namespace":"shop","name":"rule-2b",` + rule2bJSON + `}]}],"summary":"from DestinationRule shop/rule-2b"}`,
	}, {
		name: "naming an unchanged resource", first: v1, second: v2, message: "cluster-1: bad",
		summary: "Istio source unknown: the message names only cluster-1, " + note,
		json:    `[{"name":"cluster-1","istio_config":[],"unchanged":true,"note":"` + note + `"}],"summary":"Istio source unknown: the message names only cluster-1, ` + note + `"}`,
	}, {
		name: "naming both", first: v1, second: v2, message: "cluster-2 refers to cluster-1",
		summary: "from DestinationRule shop/rule-2b; cluster-1, also named, is " + note,
		objects: []string{"DestinationRule shop/rule-2b"},
	}, {
		name: "naming the change and three others", first: v1, second: v2, message: "cluster-0, cluster-1, cluster-2, cluster-3",
		summary: "from DestinationRule shop/rule-2b; 3 other resources named are " + note,
		objects: []string{"DestinationRule shop/rule-2b"},
	}, {
		name: "naming none", first: v1, second: v2, message: "bad",
		summary: "the message names no resource; what the push changed comes from DestinationRule shop/rule-2b (the 7 resources the push carried unchanged since the last accepted version are not suspected)",
		objects: []string{"DestinationRule shop/rule-2b"},
		json: `[{"name":"cluster-2","istio_config":[{"kind":"DestinationRule","namespace":"shop","name":"rule-2b",` + rule2bJSON + `}]}],` +
			`"summary":"the message names no resource; what the push changed comes from DestinationRule shop/rule-2b (the 7 resources the push carried unchanged since the last accepted version are not suspected)",` +
			`"unchanged_not_suspected":7}`,
	}, {
		name: "naming none, no object recorded", first: plain(5), second: plain(7), message: "bad",
		summary: "no Istio config recorded in beta (the 4 resources the push carried unchanged since the last accepted version are not suspected)",
	}, {
		name: "naming none, nothing changed", first: v1, second: v1, message: "bad",
		summary: "Istio source unknown: the message names no resource, and the push changed none (the 8 resources the push carried unchanged since the last accepted version are not suspected)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := origin.Of(rejectedChange(t, tt.first, tt.second, tt.message))
			if got := x.Summary(); got != tt.summary {
				t.Errorf("Summary() =\n%q, want\n%q", got, tt.summary)
			}
			var objs []string
			for _, o := range x.Objects() {
				objs = append(objs, o.String())
			}
			if strings.Join(objs, ", ") != strings.Join(tt.objects, ", ") {
				t.Errorf("Objects() = %v, want %v", objs, tt.objects)
			}
			b, err := json.Marshal(x)
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"resources":` + tt.json; tt.json != "" && string(b) != want {
				t.Errorf("JSON:\n got %s\nwant %s", b, want)
			}
			// A client of /debug/streams reads back what the tap said.
			var back origin.Rejection
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if again, _ := json.Marshal(&back); string(again) != string(b) {
				t.Errorf("read back and written again:\n got %s\nwant %s", again, b)
			}
		})
	}
}

const rule2bJSON = `"path":"/apis/networking.istio.io/v1/namespaces/shop/destination-rule/rule-2b","kubectl":"kubectl get destinationrule -n shop rule-2b"`
