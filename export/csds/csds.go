// Package csds answers what each proxy holds, resource by resource: Envoy's client status discovery service, istioctl proxy-status's syncz, and /debug/resources.
package csds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/redact"
	"github.com/adstap/adstap/track"
)

// CSDS answers envoy.service.status.v3.ClientStatusDiscoveryService for
// every proxy the tap relays, from what crossed the wire: one ClientConfig
// per proxy (node id), each resource with its client status, accepted
// version, rejection and, when resources are retained, the accepted
// resource itself, redacted as /debug/config shows it. It reads the
// tracker one stream at a time and never holds a lock of the tracker while
// it builds or sends an answer.
type CSDS struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer
	tracker  *track.Tracker
	retained *retained.Store // nil without --retain-resources
}

// New answers from t, with the resources retained (nil for none).
func New(t *track.Tracker, store *retained.Store) *CSDS {
	return &CSDS{tracker: t, retained: store}
}

// Register adds the service to s.
func (c *CSDS) Register(s *grpc.Server) {
	statusv3.RegisterClientStatusDiscoveryServiceServer(s, c)
}

// FetchClientStatus answers one request.
func (c *CSDS) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	return c.ClientStatus(ctx, req)
}

// StreamClientStatus answers each request of the stream in turn.
func (c *CSDS) StreamClientStatus(stream statusv3.ClientStatusDiscoveryService_StreamClientStatusServer) error {
	return eachRequest(stream.Recv, func(req *statusv3.ClientStatusRequest) error {
		resp, err := c.ClientStatus(stream.Context(), req)
		if err != nil {
			return err
		}
		return stream.Send(resp)
	})
}

// eachRequest hands each request recv returns to handle, in turn, until
// the client ends the stream (nil), recv fails or handle does (their
// error): the loop of every stream this package serves, CSDS's and syncz's.
func eachRequest[Req any](recv func() (Req, error), handle func(Req) error) error {
	for {
		req, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := handle(req); err != nil {
			return err
		}
	}
}

// Bounds on what a request may ask, so that a hostile one costs little.
const (
	maxNodeMatchers = 64
	maxMatcherBytes = 1024
)

// ClientStatus is the answer to req: the proxies its node_matchers select
// (all without any), one ClientConfig each.
func (c *CSDS) ClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	match, err := nodeMatch(req.GetNodeMatchers())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	clients := c.tracker.ClientResources(match, true)
	var bodies map[uint64]map[string]map[string]retained.Resource
	if c.retained != nil && !req.GetExcludeResourceContents() {
		ids := make([]uint64, 0, len(clients))
		for _, cl := range clients {
			ids = append(ids, cl.StreamID)
		}
		bodies = c.retained.Snapshot(ctx, ids)
	}
	resp := &statusv3.ClientStatusResponse{}
	for _, cl := range MergeByNode(clients) {
		cc := &statusv3.ClientConfig{Node: nodeProto(cl)}
		types := map[string]statusv3.ConfigStatus{}
		for _, ty := range cl.Types {
			types[ty.TypeURL] = configStatus(ty.State)
		}
		for _, r := range cl.Resources {
			g := &statusv3.ClientConfig_GenericXdsConfig{
				TypeUrl:      r.TypeURL,
				Name:         r.Name,
				VersionInfo:  r.Version,
				ConfigStatus: types[r.TypeURL],
				ClientStatus: adminv3.ClientResourceStatus(r.Status),
			}
			if !r.Updated.IsZero() {
				g.LastUpdated = timestamppb.New(r.Updated)
			}
			if r.ErrorDetails != "" || r.ErrorVersion != "" {
				g.ErrorState = &adminv3.UpdateFailureState{Details: r.ErrorDetails, VersionInfo: r.ErrorVersion}
				if !r.ErrorAt.IsZero() {
					g.ErrorState.LastUpdateAttempt = timestamppb.New(r.ErrorAt)
				}
			}
			if b, ok := bodies[r.stream][r.TypeURL][r.Name]; ok && r.Version != "" {
				if body, _, err := redact.Resource(b.TypeURL, b.Body); err == nil {
					g.XdsConfig = &anypb.Any{TypeUrl: b.TypeURL, Value: body}
				}
			}
			cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, g)
		}
		resp.Config = append(resp.Config, cc)
	}
	return resp, nil
}

// NodeResources is one proxy's resources, merged from its streams.
type NodeResources struct {
	track.ClientResources
	// streams says which stream each resource came from, for its body.
	Resources []nodeResource
}

type nodeResource struct {
	track.ResourceStatus
	stream uint64
}

// MergeByNode gathers the streams of each node id into one proxy, in
// order of their first stream: a proxy may hold a stream per type, or a new
// stream while its old one closes, and what a later stream says of a
// resource wins.
func MergeByNode(clients []track.ClientResources) []NodeResources {
	var out []NodeResources
	at := map[string]int{}
	for _, cl := range clients {
		i, ok := at[cl.Node.ID]
		if !ok {
			i = len(out)
			at[cl.Node.ID] = i
			out = append(out, NodeResources{ClientResources: cl})
			out[i].ClientResources.Resources = nil
		} else {
			n := &out[i].ClientResources
			n.Types = append(n.Types, cl.Types...)
			if cl.ControlPlane != "" {
				n.ControlPlane = cl.ControlPlane
			}
			if cl.Metadata.IstioVersion != "" {
				n.Metadata = cl.Metadata
			}
		}
		for _, r := range cl.Resources {
			out[i].Resources = append(out[i].Resources, nodeResource{ResourceStatus: r, stream: cl.StreamID})
		}
	}
	for i := range out {
		out[i].Resources = lastPerName(out[i].Resources)
		out[i].Types = lastPerType(out[i].Types)
	}
	return out
}

func lastPerName(rs []nodeResource) []nodeResource {
	type key struct{ url, name string }
	last := make(map[key]int, len(rs))
	for i, r := range rs {
		last[key{r.TypeURL, r.Name}] = i
	}
	if len(last) == len(rs) {
		return rs
	}
	out := rs[:0]
	for i, r := range rs {
		if last[key{r.TypeURL, r.Name}] == i {
			out = append(out, r)
		}
	}
	return out
}

func lastPerType(ts []track.TypeStatus) []track.TypeStatus {
	last := make(map[string]int, len(ts))
	for i, t := range ts {
		last[t.TypeURL] = i
	}
	if len(last) == len(ts) {
		return ts
	}
	out := ts[:0]
	for i, t := range ts {
		if last[t.TypeURL] == i {
			out = append(out, t)
		}
	}
	return out
}

// nodeProto is the node as its client described itself, as far as the tap
// keeps it.
func nodeProto(cl NodeResources) *corev3.Node {
	n := &corev3.Node{Id: cl.Node.ID, Cluster: cl.Node.Cluster}
	if name, version, ok := strings.Cut(cl.Node.UserAgent, "/"); ok {
		n.UserAgentName, n.UserAgentVersionType = name, &corev3.Node_UserAgentVersion{UserAgentVersion: version}
	} else if cl.Node.UserAgent != "" {
		n.UserAgentName = cl.Node.UserAgent
	}
	if cl.Node.Region != "" || cl.Node.Zone != "" || cl.Node.SubZone != "" {
		n.Locality = &corev3.Locality{Region: cl.Node.Region, Zone: cl.Node.Zone, SubZone: cl.Node.SubZone}
	}
	if v := cl.Metadata.IstioVersion; v != "" {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{"ISTIO_VERSION": structpb.NewStringValue(v)}}
	}
	return n
}

func configStatus(s track.State) statusv3.ConfigStatus {
	switch s {
	case track.StateSynced:
		return statusv3.ConfigStatus_SYNCED
	case track.StateNotSent:
		return statusv3.ConfigStatus_NOT_SENT
	case track.StateStale:
		return statusv3.ConfigStatus_STALE
	case track.StateNACKed:
		return statusv3.ConfigStatus_ERROR
	}
	return statusv3.ConfigStatus_UNKNOWN
}

// nodeMatch makes the node_matchers into one test (any of them, node id
// alone); nil for none. Metadata matchers are refused: the tap keeps none
// of a node's metadata but its Istio version.
func nodeMatch(ms []*matcherv3.NodeMatcher) (func(track.Node) bool, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	if len(ms) > maxNodeMatchers {
		return nil, fmt.Errorf("%d node_matchers: at most %d", len(ms), maxNodeMatchers)
	}
	tests := make([]func(string) bool, 0, len(ms))
	for i, m := range ms {
		if len(m.GetNodeMetadatas()) > 0 {
			return nil, fmt.Errorf("node_matchers[%d]: node_metadatas are not supported; match the node id", i)
		}
		f, err := stringMatch(m.GetNodeId())
		if err != nil {
			return nil, fmt.Errorf("node_matchers[%d].node_id: %w", i, err)
		}
		tests = append(tests, f)
	}
	return func(n track.Node) bool {
		for _, f := range tests {
			if f(n.ID) {
				return true
			}
		}
		return false
	}, nil
}

// stringMatch is an envoy.type.matcher.v3.StringMatcher; nil matches
// anything.
func stringMatch(m *matcherv3.StringMatcher) (func(string) bool, error) {
	if m == nil {
		return func(string) bool { return true }, nil
	}
	fold := m.GetIgnoreCase()
	norm := func(s string) string {
		if fold {
			return strings.ToLower(s)
		}
		return s
	}
	var pattern string
	var test func(s, p string) bool
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		pattern, test = p.Exact, func(s, p string) bool { return s == p }
	case *matcherv3.StringMatcher_Prefix:
		pattern, test = p.Prefix, strings.HasPrefix
	case *matcherv3.StringMatcher_Suffix:
		pattern, test = p.Suffix, strings.HasSuffix
	case *matcherv3.StringMatcher_Contains:
		pattern, test = p.Contains, strings.Contains
	case *matcherv3.StringMatcher_SafeRegex:
		re := p.SafeRegex.GetRegex()
		if len(re) > maxMatcherBytes {
			return nil, fmt.Errorf("regex of %d bytes: at most %d", len(re), maxMatcherBytes)
		}
		rx, err := regexp.Compile("^(?:" + re + ")$")
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		return rx.MatchString, nil
	default:
		return nil, fmt.Errorf("match pattern %T is not supported", p)
	}
	if len(pattern) > maxMatcherBytes {
		return nil, fmt.Errorf("pattern of %d bytes: at most %d", len(pattern), maxMatcherBytes)
	}
	pattern = norm(pattern)
	return func(s string) bool { return test(norm(s), pattern) }, nil
}
