package codec

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the envelope messages. They are copied from the generated
// code the peers are built from, not from memory, and must be re-checked there
// when a dependency moves:
//
//   - go-control-plane/envoy v1.40.0 service/discovery/v3/discovery.pb.go:
//     DiscoveryRequest, DiscoveryResponse, DeltaDiscoveryRequest,
//     DeltaDiscoveryResponse, Resource, ResourceName, ResourceLocator
//   - go-control-plane/envoy v1.40.0 config/core/v3/base.pb.go:
//     Node, Locality, BuildVersion, ControlPlane
//   - go-control-plane/envoy v1.40.0 type/v3/semantic_version.pb.go: SemanticVersion
//   - genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 status/status.pb.go: Status
//   - protobuf v1.36.12 types/known/anypb/any.pb.go: Any
//   - protobuf v1.36.12 types/known/structpb/struct.pb.go: Struct, Value
//
// Fields the tap has no use for are listed in comments so that a reader can
// tell "skipped on purpose" from "forgotten".
const (
	// DiscoveryRequest.
	reqVersionInfo      = 1 // string version_info
	reqNode             = 2 // config.core.v3.Node node
	reqResourceNames    = 3 // repeated string resource_names
	reqTypeURL          = 4 // string type_url
	reqResponseNonce    = 5 // string response_nonce
	reqErrorDetail      = 6 // google.rpc.Status error_detail
	reqResourceLocators = 7 // repeated ResourceLocator resource_locators

	// DeltaDiscoveryRequest.
	dreqNode                = 1 // config.core.v3.Node node
	dreqTypeURL             = 2 // string type_url
	dreqSubscribe           = 3 // repeated string resource_names_subscribe
	dreqUnsubscribe         = 4 // repeated string resource_names_unsubscribe
	dreqInitialVersions     = 5 // map<string, string> initial_resource_versions
	dreqResponseNonce       = 6 // string response_nonce
	dreqErrorDetail         = 7 // google.rpc.Status error_detail
	dreqLocatorsSubscribe   = 8 // repeated ResourceLocator resource_locators_subscribe
	dreqLocatorsUnsubscribe = 9 // repeated ResourceLocator resource_locators_unsubscribe

	// Messages nested in the envelope.
	mapEntryKey               = 1 // a map entry is a message {key = 1; value = 2}
	mapEntryValue             = 2 // (initial_resource_versions)
	locatorName               = 1 // ResourceLocator.name; dynamic_parameters (2) skipped
	resourceNameName          = 1 // ResourceName.name; dynamic_parameter_constraints (2) skipped
	controlPlaneIdentifier    = 1 // ControlPlane.identifier
	statusCode                = 1 // int32 Status.code
	statusMessage             = 2 // string Status.message; details (3) skipped
	anyTypeURL                = 1 // string Any.type_url
	structFields              = 1 // map<string, Value> Struct.fields
	valueNull                 = 1 // Value.null_value (enum); the Value kinds are a oneof
	valueNumber               = 2 // double Value.number_value
	valueString               = 3 // string Value.string_value
	valueBool                 = 4 // bool Value.bool_value
	valueStruct               = 5 // Struct Value.struct_value
	valueList                 = 6 // ListValue Value.list_value
	anyValue                  = 2 // bytes Any.value
	semverMajor               = 1 // uint32 SemanticVersion.major_number
	semverMinor               = 2 // uint32 SemanticVersion.minor_number
	semverPatch               = 3 // uint32 SemanticVersion.patch
	buildVersionVersion       = 1 // SemanticVersion BuildVersion.version; metadata (2) skipped
	localityRegion            = 1 // string Locality.region
	localityZone              = 2 // string Locality.zone
	localitySubZone           = 3 // string Locality.sub_zone
	nodeID                    = 1 // string Node.id
	nodeCluster               = 2 // string Node.cluster
	nodeMetadata              = 3 // google.protobuf.Struct Node.metadata: only ISTIO_VERSION is read
	nodeLocality              = 4 // Locality Node.locality
	nodeUserAgentName         = 6 // string Node.user_agent_name
	nodeUserAgentVersion      = 7 // string Node.user_agent_version, oneof with 8
	nodeUserAgentBuildVersion = 8 // BuildVersion Node.user_agent_build_version
	// Node extensions (9), client_features (10), listening_addresses (11),
	// dynamic_parameters (12) skipped.

	// DiscoveryResponse. canary (3) skipped.
	respVersionInfo    = 1 // string version_info
	respResources      = 2 // repeated Any resources
	respTypeURL        = 4 // string type_url
	respNonce          = 5 // string nonce
	respControlPlane   = 6 // config.core.v3.ControlPlane control_plane
	respResourceErrors = 7 // repeated ResourceError resource_errors

	// DeltaDiscoveryResponse.
	drespSystemVersionInfo    = 1 // string system_version_info
	drespResources            = 2 // repeated Resource resources
	drespTypeURL              = 4 // string type_url
	drespNonce                = 5 // string nonce
	drespRemovedResources     = 6 // repeated string removed_resources
	drespControlPlane         = 7 // config.core.v3.ControlPlane control_plane
	drespRemovedResourceNames = 8 // repeated ResourceName removed_resource_names
	drespResourceErrors       = 9 // repeated ResourceError resource_errors

	// ResourceError.
	resourceErrorName   = 1 // ResourceName resource_name
	resourceErrorDetail = 2 // google.rpc.Status error_detail

	// Resource. aliases (4), ttl (6), cache_control (7), metadata (9) skipped.
	resourceVersion      = 1 // string version
	resourceResource     = 2 // Any resource
	resourceName         = 3 // string name
	resourceResourceName = 8 // ResourceName resource_name
)

var errFieldNumber = errors.New("invalid field number")

// fieldReader walks the fields of one message in wire order without copying.
// The decoders read only what they need and let everything else go by,
// including known fields with an unexpected wire type, which is also how
// protobuf itself treats them (as unknown fields).
type fieldReader struct {
	buf []byte
	off int
	// base is the offset of buf in the message, for error messages: a
	// message received in segments is read one segment at a time, and its
	// errors must say the same byte as when it is read in one piece.
	base int
	err  error

	num protowire.Number
	typ protowire.Type
	b   []byte // value of a length-delimited field
	v   uint64 // value of a varint field
}

// next moves to the next field; it returns false at the end of the message or
// at the first malformed byte, after which err says what went wrong.
func (r *fieldReader) next() bool {
	if r.err != nil || r.off >= len(r.buf) {
		return false
	}
	b := r.buf[r.off:]
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return r.fail(protowire.ParseError(n))
	}
	if num > protowire.MaxValidNumber {
		return r.fail(fmt.Errorf("%w %d", errFieldNumber, num))
	}
	var m int
	switch typ {
	case protowire.BytesType:
		r.b, m = protowire.ConsumeBytes(b[n:])
	case protowire.VarintType:
		r.v, m = protowire.ConsumeVarint(b[n:])
	default:
		m = protowire.ConsumeFieldValue(num, typ, b[n:])
	}
	if m < 0 {
		return r.fail(fmt.Errorf("field %d: %w", num, protowire.ParseError(m)))
	}
	r.num, r.typ = num, typ
	r.off += n + m
	return true
}

func (r *fieldReader) fail(err error) bool {
	r.err = fmt.Errorf("at byte %d: %w", r.base+r.off, err)
	return false
}

// bytesField reports whether the current field is number num and
// length-delimited.
func (r *fieldReader) bytesField(num protowire.Number) bool {
	return r.num == num && r.typ == protowire.BytesType
}

// varintField reports whether the current field is number num and a varint.
func (r *fieldReader) varintField(num protowire.Number) bool {
	return r.num == num && r.typ == protowire.VarintType
}
