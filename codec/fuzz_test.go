package codec_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/zeebo/xxh3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

var writeSeeds = flag.Bool("write-seeds", false, "rewrite testdata/fuzz/FuzzDecode and FuzzSegmentedDecode from marshalled messages")

// seedMessages are the checked-in seed corpus of FuzzDecode: one real message
// of each kind the decoder reads, so that the fuzzer starts from valid frames.
func seedMessages() map[string]proto.Message {
	return map[string]proto.Message{
		"sotw-request-first": &discoveryv3.DiscoveryRequest{Node: envoyNode(), TypeUrl: codec.TypeCluster},
		"sotw-request-nack": &discoveryv3.DiscoveryRequest{
			VersionInfo: "v1", ResourceNames: []string{"a", "b"}, TypeUrl: codec.TypeEndpoint, ResponseNonce: "n2",
			ErrorDetail:      &statuspb.Status{Code: 3, Message: "rejected"},
			ResourceLocators: []*discoveryv3.ResourceLocator{{Name: "c", DynamicParameters: map[string]string{"k": "v"}}},
		},
		"delta-request-reconnect": &discoveryv3.DeltaDiscoveryRequest{
			Node: envoyNode(), TypeUrl: codec.TypeCluster, ResourceNamesSubscribe: []string{"*"},
			InitialResourceVersions: map[string]string{"a": "1", "b": "2"},
		},
		"delta-request-nack": &discoveryv3.DeltaDiscoveryRequest{
			TypeUrl: codec.TypeRoute, ResponseNonce: "n3", ResourceNamesUnsubscribe: []string{"r"},
			ErrorDetail: &statuspb.Status{Code: 13, Message: "bad route"},
		},
		"sotw-response-cds": &discoveryv3.DiscoveryResponse{
			VersionInfo: "2021-08-09T16:20:50Z/257", TypeUrl: codec.TypeCluster, Nonce: "n1",
			Resources:    []*anypb.Any{mustAny(istioCluster(1)), mustAny(istioCluster(2))},
			ControlPlane: &corev3.ControlPlane{Identifier: "istiod-1"},
		},
		"sotw-response-ttl": &discoveryv3.DiscoveryResponse{
			VersionInfo: "v2", TypeUrl: codec.TypeSecret, Nonce: "n4",
			Resources: []*anypb.Any{
				mustAny(&discoveryv3.Resource{Name: "default", Version: "v2", Resource: mustAny(secret("default")), Ttl: durationpb.New(30e9)}),
				mustAny(&discoveryv3.Resource{Name: "ROOTCA", Version: "v1"}),
			},
		},
		"delta-response-eds": &discoveryv3.DeltaDiscoveryResponse{
			SystemVersionInfo: "v3", TypeUrl: codec.TypeEndpoint, Nonce: "n5",
			Resources: []*discoveryv3.Resource{
				{Name: "outbound|8080||a", Version: "h1", Resource: mustAny(cla("outbound|8080||a", "10.0.0.1"))},
				{ResourceName: &discoveryv3.ResourceName{Name: "xdstp://b"}, Version: "h2", Resource: mustAny(cla("b", "10.0.0.2"))},
			},
			RemovedResources:     []string{"outbound|8080||gone"},
			RemovedResourceNames: []*discoveryv3.ResourceName{{Name: "xdstp://gone"}},
			ControlPlane:         &corev3.ControlPlane{Identifier: "istiod-1"},
		},
	}
}

// segmentSizes are the splits of the FuzzSegmentedDecode seeds: every header
// cut, uneven segments with an empty one, and segments longer than most
// fields.
var segmentSizes = map[string]string{
	"1-byte": "\x01",
	"uneven": "\x07\x00\x1d\x02",
	"64":     "\x40",
}

// TestWriteSeeds regenerates the seed corpus when run with -write-seeds; the
// files are checked in so that every go test run replays them.
func TestWriteSeeds(t *testing.T) {
	leakcheck.Check(t)
	if !*writeSeeds {
		t.Skip("run with -write-seeds to regenerate testdata/fuzz/FuzzDecode and FuzzSegmentedDecode")
	}
	write := func(fuzz, name string, args ...[]byte) {
		dir := filepath.Join("testdata", "fuzz", fuzz)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		content := "go test fuzz v1\n"
		for _, a := range args {
			content += fmt.Sprintf("[]byte(%s)\n", strconv.Quote(string(a)))
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, m := range seedMessages() {
		b := marshal(t, m)
		write("FuzzDecode", name, b)
		if !strings.Contains(name, "response") {
			continue
		}
		for split, sizes := range segmentSizes {
			write("FuzzSegmentedDecode", name+"-"+split, b, []byte(sizes))
		}
	}
	// Groups are read by copying the rest of the message; a seed with them
	// lets the fuzzer find its way there.
	withGroups := append(marshal(t, seedMessages()["sotw-response-cds"]), unknownFields()...)
	write("FuzzSegmentedDecode", "sotw-response-unknown-fields-uneven", withGroups, []byte(segmentSizes["uneven"]))
}

// FuzzDecode feeds every input to all four decoders. They must never panic,
// and whenever protobuf accepts the input as that message, the decoder must
// accept it too and read the same envelope. Each input is also decoded in
// segments of a size it picks, which must read as the whole does;
// FuzzSegmentedDecode lets the fuzzer choose the cuts.
func FuzzDecode(f *testing.F) {
	var reused codec.Response
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, delta := range []bool{false, true} {
			req, reqErr := codec.DecodeRequest(data, delta)
			if (req == nil) == (reqErr == nil) {
				t.Fatalf("DecodeRequest returned request %v and error %v", req, reqErr)
			}
			var fresh codec.Response
			respErr := fresh.Decode(data, delta)
			reusedErr := reused.Decode(data, delta)
			if (respErr == nil) != (reusedErr == nil) {
				t.Fatalf("fresh Response: %v, reused Response: %v", respErr, reusedErr)
			}
			if respErr == nil {
				if diff := cmp.Diff(fresh, reused, cmpopts.EquateEmpty(), ignoreScratch); diff != "" {
					t.Fatalf("reused Response differs from a fresh one (-fresh +reused):\n%s", diff)
				}
			}
			sameAsDecode(t, data, xdstest.Chunk(data, 1+len(data)%17), delta, nil)
			if delta {
				checkDeltaRequest(t, data, req, reqErr)
				checkDeltaResponse(t, data, &fresh, respErr)
			} else {
				checkRequest(t, data, req, reqErr)
				checkResponse(t, data, &fresh, respErr)
			}
		}
	})
}

var sorted = cmpopts.SortSlices(func(a, b string) bool { return a < b })

func wantNode(n *corev3.Node) *codec.NodeIdentity {
	if n == nil {
		return nil
	}
	v := n.GetUserAgentVersion()
	if bv := n.GetUserAgentBuildVersion(); bv != nil {
		sv := bv.GetVersion()
		v = fmt.Sprintf("%d.%d.%d", sv.GetMajorNumber(), sv.GetMinorNumber(), sv.GetPatch())
	}
	return &codec.NodeIdentity{
		ID: n.GetId(), Cluster: n.GetCluster(), UserAgentName: n.GetUserAgentName(), UserAgentVersion: v,
		IstioVersion: n.GetMetadata().GetFields()["ISTIO_VERSION"].GetStringValue(),
		Locality: codec.Locality{
			Region: n.GetLocality().GetRegion(), Zone: n.GetLocality().GetZone(), SubZone: n.GetLocality().GetSubZone(),
		},
	}
}

func wantErrorDetail(s *statuspb.Status) *codec.ErrorDetail {
	if s == nil {
		return nil
	}
	return &codec.ErrorDetail{Code: s.GetCode(), Message: s.GetMessage()}
}

// wantResourceErrors is what protobuf makes of a response's resource_errors.
func wantResourceErrors(es []*discoveryv3.ResourceError) []codec.ResourceError {
	var want []codec.ResourceError
	for _, e := range es {
		want = append(want, codec.ResourceError{
			Name:  e.GetResourceName().GetName(),
			Error: codec.ErrorDetail{Code: e.GetErrorDetail().GetCode(), Message: e.GetErrorDetail().GetMessage()},
		})
	}
	return want
}

func locatorNames(ls []*discoveryv3.ResourceLocator) []string {
	var names []string
	for _, l := range ls {
		names = append(names, l.GetName())
	}
	return names
}

func checkRequest(t *testing.T, data []byte, got *codec.Request, err error) {
	var pb discoveryv3.DiscoveryRequest
	if proto.Unmarshal(data, &pb) != nil {
		return
	}
	if err != nil {
		t.Fatalf("protobuf reads a DiscoveryRequest, DecodeRequest fails: %v", err)
	}
	want := &codec.Request{
		TypeURL: pb.TypeUrl, VersionInfo: pb.VersionInfo, ResponseNonce: pb.ResponseNonce, Node: wantNode(pb.Node),
		ResourceNames: append(slices.Clone(pb.ResourceNames), locatorNames(pb.ResourceLocators)...),
		ErrorDetail:   wantErrorDetail(pb.ErrorDetail),
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), sorted); diff != "" {
		t.Fatalf("DiscoveryRequest mismatch (-protobuf +decoder):\n%s", diff)
	}
}

func checkDeltaRequest(t *testing.T, data []byte, got *codec.Request, err error) {
	var pb discoveryv3.DeltaDiscoveryRequest
	if proto.Unmarshal(data, &pb) != nil {
		return
	}
	if err != nil {
		t.Fatalf("protobuf reads a DeltaDiscoveryRequest, DecodeRequest fails: %v", err)
	}
	want := &codec.Request{
		Delta: true, TypeURL: pb.TypeUrl, ResponseNonce: pb.ResponseNonce, Node: wantNode(pb.Node),
		Subscribe:       append(slices.Clone(pb.ResourceNamesSubscribe), locatorNames(pb.ResourceLocatorsSubscribe)...),
		Unsubscribe:     append(slices.Clone(pb.ResourceNamesUnsubscribe), locatorNames(pb.ResourceLocatorsUnsubscribe)...),
		InitialVersions: pb.InitialResourceVersions,
		ErrorDetail:     wantErrorDetail(pb.ErrorDetail),
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), sorted); diff != "" {
		t.Fatalf("DeltaDiscoveryRequest mismatch (-protobuf +decoder):\n%s", diff)
	}
}

// wantResource is what protobuf makes of a Resource wrapper. The name is left
// out when it would come from the resource body, which protobuf does not read.
func wantResource(r *discoveryv3.Resource, got codec.Resource) codec.Resource {
	w := codec.Resource{Name: []byte(r.Name), Version: []byte(r.Version)}
	if len(w.Name) == 0 {
		w.Name = []byte(r.GetResourceName().GetName())
	}
	if len(w.Name) == 0 {
		w.Name = got.Name
	}
	if r.Resource == nil {
		w.Heartbeat = true
	} else {
		w.Hash = xxh3.Hash(r.Resource.Value)
	}
	return w
}

func checkResponse(t *testing.T, data []byte, got *codec.Response, err error) {
	var pb discoveryv3.DiscoveryResponse
	if proto.Unmarshal(data, &pb) != nil {
		return
	}
	want := codec.Response{
		TypeURL: pb.TypeUrl, VersionInfo: pb.VersionInfo, Nonce: pb.Nonce, ControlPlane: pb.GetControlPlane().GetIdentifier(),
		ResourceErrors: wantResourceErrors(pb.ResourceErrors),
	}
	for i, a := range pb.Resources {
		var g codec.Resource
		if i < len(got.Resources) {
			g = got.Resources[i]
		}
		if a.TypeUrl != codec.TypeResource {
			want.Resources = append(want.Resources, codec.Resource{
				Name: g.Name, Hash: xxh3.Hash(a.Value),
			})
			continue
		}
		// protobuf leaves a wrapper in Any.value; the decoder reads it, so
		// only a wrapper protobuf can read too binds the decoder.
		var r discoveryv3.Resource
		if proto.Unmarshal(a.Value, &r) != nil {
			return
		}
		want.Resources = append(want.Resources, wantResource(&r, g))
	}
	if err != nil {
		t.Fatalf("protobuf reads a DiscoveryResponse, Decode fails: %v", err)
	}
	if diff := cmp.Diff(want, *got, cmpopts.EquateEmpty(), ignoreBody, ignoreScratch); diff != "" {
		t.Fatalf("DiscoveryResponse mismatch (-protobuf +decoder):\n%s", diff)
	}
}

func checkDeltaResponse(t *testing.T, data []byte, got *codec.Response, err error) {
	var pb discoveryv3.DeltaDiscoveryResponse
	if proto.Unmarshal(data, &pb) != nil {
		return
	}
	if err != nil {
		t.Fatalf("protobuf reads a DeltaDiscoveryResponse, Decode fails: %v", err)
	}
	want := codec.Response{
		Delta: true, TypeURL: pb.TypeUrl, VersionInfo: pb.SystemVersionInfo, Nonce: pb.Nonce,
		ControlPlane:     pb.GetControlPlane().GetIdentifier(),
		RemovedResources: slices.Clone(pb.RemovedResources),
		ResourceErrors:   wantResourceErrors(pb.ResourceErrors),
	}
	for _, n := range pb.RemovedResourceNames {
		want.RemovedResources = append(want.RemovedResources, n.GetName())
	}
	for i, r := range pb.Resources {
		var g codec.Resource
		if i < len(got.Resources) {
			g = got.Resources[i]
		}
		want.Resources = append(want.Resources, wantResource(r, g))
	}
	if diff := cmp.Diff(want, *got, cmpopts.EquateEmpty(), sorted, ignoreBody, ignoreScratch); diff != "" {
		t.Fatalf("DeltaDiscoveryResponse mismatch (-protobuf +decoder):\n%s", diff)
	}
}
