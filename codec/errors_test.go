package codec_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// msg builds a message from fields, each a number and a value: a []byte or a
// string becomes a length-delimited field, a uint64 a varint.
func msg(fields ...any) []byte {
	var b []byte
	for i := 0; i < len(fields); i += 2 {
		num := protowire.Number(fields[i].(int))
		switch v := fields[i+1].(type) {
		case []byte:
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
		case string:
			b = protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), v)
		case uint64:
			b = protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
		default:
			panic("msg: unsupported field value")
		}
	}
	return b
}

// truncatedAny says its value is 10 bytes long and holds 3.
var truncatedAny = append(protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), 10), "abc"...)

func TestDecodeErrors(t *testing.T) {
	leakcheck.Check(t)
	goodAny := marshal(t, mustAny(secret("default")))
	overflow := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	tests := []struct {
		name     string
		response bool
		delta    bool
		in       []byte
		wantErr  string
		wantEOF  bool // errors.Is(err, io.ErrUnexpectedEOF)
	}{
		{
			name: "garbage", response: true, in: overflow,
			wantErr: "decoding DiscoveryResponse at byte 0: proto: variable length integer overflow",
		},
		{
			name: "field number 0", in: []byte{0x00, 0x00},
			wantErr: "decoding DiscoveryRequest at byte 0: proto: invalid field number",
		},
		{
			name: "field number above the protobuf maximum", delta: true,
			in:      protowire.AppendVarint(protowire.AppendTag(nil, protowire.MaxValidNumber+1, protowire.VarintType), 1),
			wantErr: "decoding DeltaDiscoveryRequest at byte 0: invalid field number 536870912",
		},
		{
			name: "end group without a start", response: true, delta: true,
			in:      append(msg(5, "nonce"), protowire.AppendTag(nil, 7, protowire.EndGroupType)...),
			wantErr: "decoding DeltaDiscoveryResponse at byte 7: field 7: proto: mismatching end group marker",
		},
		{
			name: "group closed by another number", response: true,
			in:      append(protowire.AppendTag(nil, 9, protowire.StartGroupType), protowire.AppendTag(nil, 10, protowire.EndGroupType)...),
			wantErr: "decoding DiscoveryResponse at byte 0: field 9: proto: mismatching end group marker",
		},
		{
			name: "truncated nonce", response: true,
			in:      msg(1, "v1", 5, "nonce")[:8],
			wantErr: "decoding DiscoveryResponse at byte 4: field 5: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed resources[1]", response: true,
			in:      msg(2, goodAny, 2, truncatedAny, 5, "nonce"),
			wantErr: "decoding DiscoveryResponse resources[1]: Any at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed TTL wrapper", response: true,
			in:      msg(2, msg(1, codec.TypeResource, 2, truncatedAny)),
			wantErr: "decoding DiscoveryResponse resources[0]: Any value: Resource at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed Any in a TTL wrapper", response: true,
			in:      msg(2, msg(1, codec.TypeResource, 2, msg(3, "name", 2, truncatedAny))),
			wantErr: "decoding DiscoveryResponse resources[0]: Any value: Resource resource: Any at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed control_plane", response: true,
			in:      msg(6, overflow),
			wantErr: "decoding DiscoveryResponse control_plane: ControlPlane at byte 0: proto: variable length integer overflow",
		},
		{
			name: "malformed Delta resource", response: true, delta: true,
			in:      msg(2, msg(3, "a", 2, goodAny), 2, msg(3, "b", 2, truncatedAny)),
			wantErr: "decoding DeltaDiscoveryResponse resources[1]: Resource resource: Any at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed Delta resource_name", response: true, delta: true,
			in:      msg(2, msg(8, truncatedAny)),
			wantErr: "decoding DeltaDiscoveryResponse resources[0]: Resource resource_name: ResourceName at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed removed_resource_names", response: true, delta: true,
			in:      msg(6, "gone", 8, truncatedAny),
			wantErr: "decoding DeltaDiscoveryResponse removed_resource_names: ResourceName at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name:    "malformed node",
			in:      msg(4, codec.TypeCluster, 2, truncatedAny),
			wantErr: "decoding DiscoveryRequest node: Node at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed locality", delta: true,
			in:      msg(1, msg(1, "id", 4, overflow)),
			wantErr: "decoding DeltaDiscoveryRequest node: locality: Locality at byte 0: proto: variable length integer overflow",
		},
		{
			name:    "malformed build version",
			in:      msg(2, msg(8, msg(1, truncatedAny))),
			wantErr: "decoding DiscoveryRequest node: user_agent_build_version: BuildVersion version: SemanticVersion at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name:    "malformed error_detail",
			in:      msg(5, "n1", 6, msg(1, uint64(3))[:1]),
			wantErr: "decoding DiscoveryRequest error_detail: Status at byte 0: field 1: unexpected EOF", wantEOF: true,
		},
		{
			name: "malformed initial_resource_versions entry", delta: true,
			in:      msg(5, truncatedAny),
			wantErr: "decoding DeltaDiscoveryRequest initial_resource_versions: map entry at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
		{
			name:    "malformed resource_locators",
			in:      msg(7, overflow),
			wantErr: "decoding DiscoveryRequest resource_locators: ResourceLocator at byte 0: proto: variable length integer overflow",
		},
		{
			name: "malformed resource_locators_unsubscribe", delta: true,
			in:      msg(9, truncatedAny),
			wantErr: "decoding DeltaDiscoveryRequest resource_locators_unsubscribe: ResourceLocator at byte 0: field 2: unexpected EOF", wantEOF: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.response {
				var r codec.Response
				err = r.Decode(tt.in, tt.delta)
			} else {
				var r *codec.Request
				r, err = codec.DecodeRequest(tt.in, tt.delta)
				if r != nil {
					t.Errorf("DecodeRequest returned %+v with its error", r)
				}
			}
			if err == nil {
				t.Fatalf("decoding %x: no error, want %q", tt.in, tt.wantErr)
			}
			// protobuf randomizes the space after "proto:" so that nobody
			// matches its messages exactly; only that part is normalized.
			if got := strings.ReplaceAll(err.Error(), "proto:\u00a0", "proto: "); got != tt.wantErr {
				t.Errorf("error:\n got %q\nwant %q", got, tt.wantErr)
			}
			if got := errors.Is(err, io.ErrUnexpectedEOF); got != tt.wantEOF {
				t.Errorf("errors.Is(%v, io.ErrUnexpectedEOF) = %v, want %v", err, got, tt.wantEOF)
			}
		})
	}
}

// Every prefix of a frame either ends between two top-level fields, which
// makes it a valid (shorter) message, or cuts one, which must be an error.
// protobuf itself tells which is which.
func TestDecodeTruncated(t *testing.T) {
	leakcheck.Check(t)
	frames := []struct {
		name     string
		response bool
		delta    bool
		msg      proto.Message
	}{
		{"DiscoveryRequest", false, false, &discoveryv3.DiscoveryRequest{
			VersionInfo: "v1", Node: envoyNode(), ResourceNames: []string{"a", "b"}, TypeUrl: codec.TypeEndpoint,
			ResponseNonce: "n1", ErrorDetail: &statuspb.Status{Code: 3, Message: "bad"},
			ResourceLocators: []*discoveryv3.ResourceLocator{{Name: "c"}},
		}},
		{"DeltaDiscoveryRequest", false, true, &discoveryv3.DeltaDiscoveryRequest{
			Node: envoyNode(), TypeUrl: codec.TypeCluster, ResourceNamesSubscribe: []string{"a"},
			ResourceNamesUnsubscribe: []string{"b"}, InitialResourceVersions: map[string]string{"c": "1"},
			ResponseNonce: "n1", ErrorDetail: &statuspb.Status{Code: 3, Message: "bad"},
		}},
		{"DiscoveryResponse", true, false, &discoveryv3.DiscoveryResponse{
			VersionInfo: "v1", TypeUrl: codec.TypeCluster, Nonce: "n1",
			Resources: []*anypb.Any{
				mustAny(istioCluster(1)),
				mustAny(&discoveryv3.Resource{Name: "w", Version: "1", Resource: mustAny(istioCluster(2))}),
			},
			ControlPlane: &corev3.ControlPlane{Identifier: "istiod"},
		}},
		{"DeltaDiscoveryResponse", true, true, &discoveryv3.DeltaDiscoveryResponse{
			SystemVersionInfo: "v1", TypeUrl: codec.TypeCluster, Nonce: "n1",
			Resources: []*discoveryv3.Resource{
				{Name: "a", Version: "1", Resource: mustAny(istioCluster(1))},
				{Name: "b", Version: "2"},
			},
			RemovedResources: []string{"c"}, RemovedResourceNames: []*discoveryv3.ResourceName{{Name: "d"}},
			ControlPlane: &corev3.ControlPlane{Identifier: "istiod"},
		}},
	}
	for _, f := range frames {
		t.Run(f.name, func(t *testing.T) {
			full := marshal(t, f.msg)
			var r codec.Response
			for i := range len(full) {
				in := full[:i]
				wantErr := proto.Unmarshal(in, f.msg.ProtoReflect().New().Interface()) != nil
				var err error
				if f.response {
					err = r.Decode(in, f.delta)
				} else {
					_, err = codec.DecodeRequest(in, f.delta)
				}
				if gotErr := err != nil; gotErr != wantErr {
					t.Errorf("%d of %d bytes: error %v, protobuf says error: %v", i, len(full), err, wantErr)
				}
				if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("%d of %d bytes: error %v is not io.ErrUnexpectedEOF", i, len(full), err)
				}
			}
		})
	}
}
