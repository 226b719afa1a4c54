package codec

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/zeebo/xxh3"
	"google.golang.org/protobuf/encoding/protowire"
)

// NodeIdentity is the part of an xDS client's identity that the tap reports.
type NodeIdentity struct {
	ID, Cluster string
	// UserAgentName is "envoy" for Envoy, "gRPC Go" and the like for
	// proxyless gRPC.
	UserAgentName string
	// UserAgentVersion is user_agent_version, or, for clients that send a
	// structured user_agent_build_version instead (Envoy does), its semantic
	// version as "major.minor.patch".
	UserAgentVersion string
	// IstioVersion is the node metadata's ISTIO_VERSION, which istio-agent
	// (and so every sidecar and gateway) sets.
	IstioVersion string
	Locality     Locality
}

// Locality is where the client says it runs.
type Locality struct{ Region, Zone, SubZone string }

// ErrorDetail is the google.rpc.Status a client attaches to a NACK.
type ErrorDetail struct {
	Code    int32
	Message string
}

// Request is a DiscoveryRequest or a DeltaDiscoveryRequest. Its strings are
// copies, so a Request may outlive the frame it was decoded from.
type Request struct {
	Delta         bool
	TypeURL       string
	VersionInfo   string // SotW: the last version the client accepted, even in a NACK
	ResponseNonce string
	// Node is nil when absent: only the first request of a stream carries it.
	Node                   *NodeIdentity
	ResourceNames          []string          // SotW
	Subscribe, Unsubscribe []string          // Delta
	InitialVersions        map[string]string // Delta initial_resource_versions, nil when absent
	// ErrorDetail is non-nil iff error_detail is present, which is what makes
	// the request a NACK.
	ErrorDetail *ErrorDetail
}

// Response is a DiscoveryResponse or a DeltaDiscoveryResponse. It is meant to
// be reused across decodes: Decode and DecodeBuffers keep its slices (and
// the scratch space of DecodeBuffers), so a steady stream of pushes decodes
// without allocating per resource.
//
// Response has unexported fields: compare Responses with
// cmpopts.IgnoreUnexported(codec.Response{}).
type Response struct {
	Delta bool
	// TypeURL is the response's type_url, which names the type of every
	// resource in it.
	TypeURL string
	// VersionInfo is version_info in SotW and system_version_info in Delta
	// (where it is for debugging only).
	VersionInfo  string
	Nonce        string
	ControlPlane string // control_plane.identifier
	Resources    []Resource
	// RemovedResources holds removed_resources and the names of
	// removed_resource_names (Delta only).
	RemovedResources []string
	// ResourceErrors are the control plane's own per-resource errors
	// (resource_errors): a resource it could not produce.
	ResourceErrors []ResourceError

	scratch segScratch
}

// ResourceError is one entry of a response's resource_errors: the control
// plane saying it could not produce the named resource, and why.
type ResourceError struct {
	Name  string
	Error ErrorDetail
}

// Resource is one resource of a response, described without decoding it.
type Resource struct {
	// Name and Version are views into the decoded buffer, valid only until
	// that buffer is released; copy them to keep them. After DecodeBuffers
	// the views of a resource that straddled segments are into a copy the
	// Response owns instead, which its next decode overwrites.
	//
	// Name is the Delta (or SotW TTL wrapper) Resource's name, falling back
	// to the name in its resource_name, and otherwise field 1 of the resource
	// message, which is the name in every Envoy resource type. It is empty
	// when none of these is present.
	Name []byte
	// Version is the Resource's own version; it is empty in SotW unless the
	// resource came wrapped in a Resource.
	Version []byte
	// TypeURL and Body are the resource's Any: its type and serialized
	// message, views like Name. The resource's size is len(Body): a field
	// of its own was 8 bytes more for every resource of every push decoded.
	TypeURL, Body []byte
	// Hash is the XXH3-64 of the serialized resource: equal hashes mean the
	// control plane sent the same bytes again, whatever the version says.
	Hash uint64
	// Heartbeat is set for a Resource wrapper that carries no resource: under
	// the xDS TTL rules it refreshes the TTL of what the client already has.
	// Body and Hash are empty then.
	Heartbeat bool
}

// DecodeRequest reads the envelope of a DiscoveryRequest (delta false) or a
// DeltaDiscoveryRequest (delta true).
//
// The names of resource_locators (and resource_locators_subscribe and
// _unsubscribe) are added to ResourceNames (Subscribe, Unsubscribe): the
// protocol makes them an alternative spelling of the same subscription, one
// that also carries dynamic parameters, which the tap does not report.
//
// ErrorDetail.Message is as the client sent it, which may quote a private
// key: outputs decode through redact.DecodeRequest, which replaces it.
func DecodeRequest(b []byte, delta bool) (*Request, error) {
	r := &Request{Delta: delta}
	var node nodeDecoder
	if delta {
		if err := r.decodeDelta(b, &node); err != nil {
			return nil, fmt.Errorf("decoding DeltaDiscoveryRequest %w", err)
		}
	} else if err := r.decodeSotW(b, &node); err != nil {
		return nil, fmt.Errorf("decoding DiscoveryRequest %w", err)
	}
	r.Node = node.finish()
	return r, nil
}

func (r *Request) decodeSotW(b []byte, node *nodeDecoder) error {
	var names nameArena
	r.ResourceNames = names.size(b, reqResourceNames, reqResourceLocators)
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(reqVersionInfo):
			r.VersionInfo = recentText(rd.b)
		case rd.bytesField(reqNode):
			if err := node.decode(rd.b); err != nil {
				return fmt.Errorf("node: %w", err)
			}
		case rd.bytesField(reqResourceNames):
			r.ResourceNames = append(r.ResourceNames, names.text(rd.b))
		case rd.bytesField(reqTypeURL):
			r.TypeURL = InternTypeURL(rd.b)
		case rd.bytesField(reqResponseNonce):
			r.ResponseNonce = recentText(rd.b)
		case rd.bytesField(reqErrorDetail):
			if err := r.decodeErrorDetail(rd.b); err != nil {
				return err
			}
		case rd.bytesField(reqResourceLocators):
			name, err := decodeName(rd.b, locatorName)
			if err != nil {
				return fmt.Errorf("resource_locators: ResourceLocator %w", err)
			}
			r.ResourceNames = append(r.ResourceNames, names.text(name))
		}
	}
	return rd.err
}

func (r *Request) decodeDelta(b []byte, node *nodeDecoder) error {
	var subscribe, unsubscribe nameArena
	r.Subscribe = subscribe.size(b, dreqSubscribe, dreqLocatorsSubscribe)
	r.Unsubscribe = unsubscribe.size(b, dreqUnsubscribe, dreqLocatorsUnsubscribe)
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(dreqNode):
			if err := node.decode(rd.b); err != nil {
				return fmt.Errorf("node: %w", err)
			}
		case rd.bytesField(dreqTypeURL):
			r.TypeURL = InternTypeURL(rd.b)
		case rd.bytesField(dreqSubscribe):
			r.Subscribe = append(r.Subscribe, subscribe.text(rd.b))
		case rd.bytesField(dreqUnsubscribe):
			r.Unsubscribe = append(r.Unsubscribe, unsubscribe.text(rd.b))
		case rd.bytesField(dreqInitialVersions):
			k, v, err := decodeMapEntry(rd.b)
			if err != nil {
				return fmt.Errorf("initial_resource_versions: %w", err)
			}
			if r.InitialVersions == nil {
				r.InitialVersions = make(map[string]string)
			}
			r.InitialVersions[Text(k)] = Text(v)
		case rd.bytesField(dreqResponseNonce):
			r.ResponseNonce = recentText(rd.b)
		case rd.bytesField(dreqErrorDetail):
			if err := r.decodeErrorDetail(rd.b); err != nil {
				return err
			}
		case rd.bytesField(dreqLocatorsSubscribe):
			name, err := decodeName(rd.b, locatorName)
			if err != nil {
				return fmt.Errorf("resource_locators_subscribe: ResourceLocator %w", err)
			}
			r.Subscribe = append(r.Subscribe, subscribe.text(name))
		case rd.bytesField(dreqLocatorsUnsubscribe):
			name, err := decodeName(rd.b, locatorName)
			if err != nil {
				return fmt.Errorf("resource_locators_unsubscribe: ResourceLocator %w", err)
			}
			r.Unsubscribe = append(r.Unsubscribe, unsubscribe.text(name))
		}
	}
	return rd.err
}

// nameArena holds the names of one list of a request (resource_names, and
// the names of the matching resource_locators) in one string, rather than a
// string each: an EDS request names every cluster of a sidecar, and a
// sidecar's first requests would otherwise allocate hundreds of names at
// once. Keeping one of the names keeps the others' bytes too; the tracker
// interns what it keeps, which copies it (internal/canon).
type nameArena struct{ sb strings.Builder }

// size counts the names that fields names and locators of message b hold,
// and readies room for them, by an upper bound of their bytes: the fields'
// lengths. It returns an empty list with room for them all, nil when there
// are none, as a list grown by append from nil would be.
func (a *nameArena) size(b []byte, names, locators protowire.Number) []string {
	n, size := 0, 0
	rd := fieldReader{buf: b}
	for rd.next() {
		if rd.bytesField(names) || rd.bytesField(locators) {
			n++
			size += len(rd.b)
		}
	}
	// A malformed message fails in the decode that follows, which reads
	// the same fields; what was counted up to the fault is still right.
	if n == 0 {
		return nil
	}
	a.sb.Grow(size)
	return make([]string, 0, n)
}

// text is Text, into the arena: the builder only ever appends, so the
// strings it handed out earlier keep their bytes, and within the room size
// made it never moves them.
func (a *nameArena) text(b []byte) string {
	if len(b) == 0 || !utf8.Valid(b) {
		return Text(b)
	}
	start := a.sb.Len()
	a.sb.Write(b)
	return a.sb.String()[start:]
}

// decodeErrorDetail merges into an existing ErrorDetail because protobuf
// merges repeated occurrences of a message field; a decoder that replaced it
// would disagree with the peers on crafted input.
func (r *Request) decodeErrorDetail(b []byte) error {
	if r.ErrorDetail == nil {
		r.ErrorDetail = new(ErrorDetail)
	}
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.varintField(statusCode):
			r.ErrorDetail.Code = int32(rd.v)
		case rd.bytesField(statusMessage):
			r.ErrorDetail.Message = Text(rd.b)
		}
	}
	if rd.err != nil {
		return fmt.Errorf("error_detail: Status %w", rd.err)
	}
	return nil
}

// nodeDecoder merges every occurrence of node into one NodeIdentity, as protobuf
// does, and settles the user agent version oneof once all are read.
type nodeDecoder struct {
	node   *NodeIdentity
	build  bool      // user_agent_build_version is the oneof's current choice
	semver [3]uint32 // major, minor, patch of that build version
}

func (d *nodeDecoder) decode(b []byte) error {
	if d.node == nil {
		d.node = new(NodeIdentity)
	}
	n := d.node
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(nodeID):
			n.ID = Text(rd.b)
		case rd.bytesField(nodeCluster):
			n.Cluster = Text(rd.b)
		case rd.bytesField(nodeMetadata):
			if err := decodeIstioVersion(rd.b, &n.IstioVersion); err != nil {
				return fmt.Errorf("metadata: Struct %w", err)
			}
		case rd.bytesField(nodeLocality):
			if err := decodeLocality(rd.b, &n.Locality); err != nil {
				return fmt.Errorf("locality: Locality %w", err)
			}
		case rd.bytesField(nodeUserAgentName):
			n.UserAgentName = Text(rd.b)
		case rd.bytesField(nodeUserAgentVersion):
			n.UserAgentVersion = Text(rd.b)
			d.build = false
		case rd.bytesField(nodeUserAgentBuildVersion):
			// Switching the oneof starts a fresh message; staying on it merges.
			if !d.build {
				d.semver = [3]uint32{}
				d.build = true
			}
			if err := decodeBuildVersion(rd.b, &d.semver); err != nil {
				return fmt.Errorf("user_agent_build_version: BuildVersion %w", err)
			}
		}
	}
	if rd.err != nil {
		//lint:ignore ST1005 the fragment names the protobuf message the fault is in, as the decoder's other errors do
		return fmt.Errorf("Node %w", rd.err)
	}
	return nil
}

func (d *nodeDecoder) finish() *NodeIdentity {
	if d.node != nil && d.build {
		v := d.semver
		d.node.UserAgentVersion = strconv.FormatUint(uint64(v[0]), 10) + "." +
			strconv.FormatUint(uint64(v[1]), 10) + "." + strconv.FormatUint(uint64(v[2]), 10)
	}
	return d.node
}

// decodeIstioVersion finds ISTIO_VERSION among the fields of a node's
// metadata, as protobuf would read it: the last entry of the key wins, and
// so does the last kind set in its Value, which shows only if a string.
func decodeIstioVersion(b []byte, v *string) error {
	rd := fieldReader{buf: b}
	for rd.next() {
		if !rd.bytesField(structFields) {
			continue
		}
		k, val, err := decodeMapEntry(rd.b)
		if err != nil {
			return fmt.Errorf("fields: %w", err)
		}
		if string(k) != "ISTIO_VERSION" {
			continue
		}
		*v = ""
		sv := fieldReader{buf: val}
		for sv.next() {
			switch {
			case sv.bytesField(valueString):
				*v = Text(sv.b)
			case sv.varintField(valueNull), sv.num == valueNumber && sv.typ == protowire.Fixed64Type,
				sv.varintField(valueBool), sv.bytesField(valueStruct), sv.bytesField(valueList):
				*v = ""
			}
		}
		if sv.err != nil {
			return fmt.Errorf("fields: ISTIO_VERSION: Value %w", sv.err)
		}
	}
	return rd.err
}

func decodeLocality(b []byte, l *Locality) error {
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(localityRegion):
			l.Region = Text(rd.b)
		case rd.bytesField(localityZone):
			l.Zone = Text(rd.b)
		case rd.bytesField(localitySubZone):
			l.SubZone = Text(rd.b)
		}
	}
	return rd.err
}

func decodeBuildVersion(b []byte, semver *[3]uint32) error {
	rd := fieldReader{buf: b}
	for rd.next() {
		if !rd.bytesField(buildVersionVersion) {
			continue
		}
		sv := fieldReader{buf: rd.b}
		for sv.next() {
			switch {
			case sv.varintField(semverMajor):
				semver[0] = uint32(sv.v)
			case sv.varintField(semverMinor):
				semver[1] = uint32(sv.v)
			case sv.varintField(semverPatch):
				semver[2] = uint32(sv.v)
			}
		}
		if sv.err != nil {
			return fmt.Errorf("version: SemanticVersion %w", sv.err)
		}
	}
	return rd.err
}

// decodeMapEntry reads one entry of a map<string, string>.
func decodeMapEntry(b []byte) (key, value []byte, err error) {
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(mapEntryKey):
			key = rd.b
		case rd.bytesField(mapEntryValue):
			value = rd.b
		}
	}
	if rd.err != nil {
		return nil, nil, fmt.Errorf("map entry %w", rd.err)
	}
	return key, value, nil
}

// decodeName reads the name of a ResourceLocator or a ResourceName; it is nil
// when absent, so that callers can merge.
func decodeName(b []byte, num protowire.Number) ([]byte, error) {
	var name []byte
	rd := fieldReader{buf: b}
	for rd.next() {
		if rd.bytesField(num) {
			name = rd.b
		}
	}
	return name, rd.err
}

// Decode reads the envelope of a DiscoveryResponse (delta false) or a
// DeltaDiscoveryResponse (delta true) into r, replacing what r held. The
// resources' Name and Version point into b. On error r holds a partial
// result that should not be used.
func (r *Response) Decode(b []byte, delta bool) error {
	controlPlane := r.ControlPlane
	r.Reset()
	r.Delta = delta
	r.scratch.one[0] = b
	r.scratch.msg = r.scratch.one[:]
	defer func() { r.scratch.one[0], r.scratch.msg = nil, nil }()
	rd := fieldReader{buf: b}
	for rd.next() {
		if rd.typ != protowire.BytesType {
			continue
		}
		if err := r.field(rd.num, rd.b, controlPlane); err != nil {
			return r.wrap(err)
		}
	}
	if rd.err != nil {
		return r.wrap(rd.err)
	}
	return nil
}

func (r *Response) wrap(err error) error {
	if r.Delta {
		return fmt.Errorf("decoding DeltaDiscoveryResponse %w", err)
	}
	return fmt.Errorf("decoding DiscoveryResponse %w", err)
}

// Reset empties r and drops its views into the last decoded buffer, so that
// the buffer can be released and collected, while keeping r's slices and
// scratch space for the next decode.
func (r *Response) Reset() {
	// Entries past len were cleared by the Reset that shortened the slice.
	clear(r.Resources)
	clear(r.RemovedResources)
	clear(r.ResourceErrors)
	r.scratch.reset()
	*r = Response{Resources: r.Resources[:0], RemovedResources: r.RemovedResources[:0], ResourceErrors: r.ResourceErrors[:0], scratch: r.scratch}
}

// field decodes one length-delimited top-level field; every field the tap
// reads is one. Decode and decodeSegments share it so that a message read in
// segments cannot decode differently from the same message in one piece.
func (r *Response) field(num protowire.Number, b []byte, prevControlPlane string) error {
	if r.Delta {
		return r.deltaField(num, b, prevControlPlane)
	}
	return r.sotwField(num, b, prevControlPlane)
}

// growResources makes room in r.Resources for every resource of the
// message being decoded, when it is full: a Response fresh from its pool,
// or a push larger than any r decoded before, grows once to the push's size
// instead of doubling its way there (a 200-resource push allocated twice
// its resources' size that way, and copied them eight times).
func (r *Response) growResources(num protowire.Number) {
	if len(r.Resources) < cap(r.Resources) {
		return
	}
	if n := countFields(r.scratch.msg, num); n > len(r.Resources) {
		r.Resources = slices.Grow(r.Resources, n-len(r.Resources))
	}
}

func (r *Response) sotwField(num protowire.Number, b []byte, prevControlPlane string) error {
	switch num {
	case respVersionInfo:
		r.VersionInfo = recentText(b)
	case respResources:
		var res Resource
		if err := decodeSotWResource(b, &res); err != nil {
			return fmt.Errorf("resources[%d]: %w", len(r.Resources), err)
		}
		r.growResources(respResources)
		r.Resources = append(r.Resources, res)
	case respTypeURL:
		r.TypeURL = InternTypeURL(b)
	case respNonce:
		r.Nonce = recentText(b)
	case respControlPlane:
		return r.decodeControlPlane(b, prevControlPlane)
	case respResourceErrors:
		return r.decodeResourceError(b)
	}
	return nil
}

func (r *Response) deltaField(num protowire.Number, b []byte, prevControlPlane string) error {
	switch num {
	case drespSystemVersionInfo:
		r.VersionInfo = recentText(b)
	case drespResources:
		var res Resource
		if err := decodeResource(b, &res); err != nil {
			return fmt.Errorf("resources[%d]: Resource %w", len(r.Resources), err)
		}
		r.growResources(drespResources)
		r.Resources = append(r.Resources, res)
	case drespTypeURL:
		r.TypeURL = InternTypeURL(b)
	case drespNonce:
		r.Nonce = recentText(b)
	case drespRemovedResources:
		r.RemovedResources = append(r.RemovedResources, Text(b))
	case drespControlPlane:
		return r.decodeControlPlane(b, prevControlPlane)
	case drespRemovedResourceNames:
		name, err := decodeName(b, resourceNameName)
		if err != nil {
			return fmt.Errorf("removed_resource_names: ResourceName %w", err)
		}
		r.RemovedResources = append(r.RemovedResources, Text(name))
	case drespResourceErrors:
		return r.decodeResourceError(b)
	}
	return nil
}

// decodeResourceError reads one ResourceError; the strings are copies, so
// they outlive the buffer.
func (r *Response) decodeResourceError(b []byte) error {
	var e ResourceError
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(resourceErrorName):
			name, err := decodeName(rd.b, resourceNameName)
			if err != nil {
				return fmt.Errorf("resource_errors: ResourceName %w", err)
			}
			if name != nil {
				e.Name = Text(name)
			}
		case rd.bytesField(resourceErrorDetail):
			st := fieldReader{buf: rd.b}
			for st.next() {
				switch {
				case st.varintField(statusCode):
					e.Error.Code = int32(st.v)
				case st.bytesField(statusMessage):
					e.Error.Message = Text(st.b)
				}
			}
			if st.err != nil {
				return fmt.Errorf("resource_errors: Status %w", st.err)
			}
		}
	}
	if rd.err != nil {
		return fmt.Errorf("resource_errors: ResourceError %w", rd.err)
	}
	r.ResourceErrors = append(r.ResourceErrors, e)
	return nil
}

// decodeControlPlane reuses the previous response's identifier when it has
// not changed, which is always but across a control plane failover, to spare
// an allocation per response.
func (r *Response) decodeControlPlane(b []byte, prev string) error {
	rd := fieldReader{buf: b}
	for rd.next() {
		if !rd.bytesField(controlPlaneIdentifier) {
			continue
		}
		if string(rd.b) == prev {
			r.ControlPlane = prev
		} else {
			r.ControlPlane = Text(rd.b)
		}
	}
	if rd.err != nil {
		return fmt.Errorf("control_plane: ControlPlane %w", rd.err)
	}
	return nil
}

// decodeSotWResource reads one Any of a SotW response. An Any holding a
// Resource is a TTL wrapper, which is read like a Delta resource.
func decodeSotWResource(b []byte, res *Resource) error {
	typeURL, value, err := decodeAny(b)
	if err != nil {
		//lint:ignore ST1005 the fragment names the protobuf message the fault is in
		return fmt.Errorf("Any %w", err)
	}
	if string(typeURL) == TypeResource {
		if err := decodeResource(value, res); err != nil {
			//lint:ignore ST1005 the fragment names the protobuf message the fault is in
			return fmt.Errorf("Any value: Resource %w", err)
		}
		return nil
	}
	res.setBody(typeURL, value)
	return nil
}

// decodeResource reads an envoy.service.discovery.v3.Resource.
func decodeResource(b []byte, res *Resource) error {
	var typeURL, value []byte
	var body bool
	var fallbackName []byte
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(resourceVersion):
			res.Version = rd.b
		case rd.bytesField(resourceName):
			res.Name = rd.b
		case rd.bytesField(resourceResource):
			// A repeated message field merges, so a later Any only
			// overrides the fields it carries.
			t, v, err := decodeAny(rd.b)
			if err != nil {
				return fmt.Errorf("resource: Any %w", err)
			}
			if t != nil {
				typeURL = t
			}
			if v != nil {
				value = v
			}
			body = true
		case rd.bytesField(resourceResourceName):
			name, err := decodeName(rd.b, resourceNameName)
			if err != nil {
				return fmt.Errorf("resource_name: ResourceName %w", err)
			}
			if name != nil {
				fallbackName = name
			}
		}
	}
	if rd.err != nil {
		return rd.err
	}
	if len(res.Name) == 0 {
		res.Name = fallbackName
	}
	if !body {
		res.Heartbeat = true
		return nil
	}
	res.setBody(typeURL, value)
	return nil
}

// decodeAny returns nil for a field that is absent, so that callers can merge.
func decodeAny(b []byte) (typeURL, value []byte, err error) {
	rd := fieldReader{buf: b}
	for rd.next() {
		switch {
		case rd.bytesField(anyTypeURL):
			typeURL = rd.b
		case rd.bytesField(anyValue):
			value = rd.b
		}
	}
	return typeURL, value, rd.err
}

func (res *Resource) setBody(typeURL, value []byte) {
	res.TypeURL, res.Body = typeURL, value
	res.Hash = xxh3.Hash(value)
	if len(res.Name) == 0 && nameInField1(typeURL) {
		res.Name = fieldOne(value)
	}
}

// fieldOne returns field 1 of a serialized resource when it is length-delimited.
//
// It stops at the first field 1: serializers write a field once, and lowest
// numbers first, and reading on to the end would cost about as much as
// hashing. A malformed resource body gets an empty name rather than an error:
// the body is the control plane's business, the client will NACK it, and the
// tap must still track the push that the NACK answers.
func fieldOne(b []byte) []byte {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return nil
			}
			return v
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return nil
		}
		b = b[m:]
	}
	return nil
}
