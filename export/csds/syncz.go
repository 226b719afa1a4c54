package csds

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/track"
)

// Syncz answers what istioctl proxy-status asks istiod over an ordinary ADS
// stream (type istio.io/debug/syncz), for the proxies the tap relays, as
// istiod's StatusGen does: one ClientConfig per proxy, named by its id, with
// per type its config_status (SYNCED, NOT_SENT, STALE, ERROR with the NACK's
// message), node metadata with its namespace and Istio version, and the
// control plane's identifier, which istioctl shows as ISTIOD. So
// `istioctl proxy-status --xds-address ADDR --plaintext` lists them.
type Syncz struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	tracker *track.Tracker
	version string
	nonce   atomic.Uint64
}

// NewSyncz answers from t; version is adstap's, for its identifier when no
// proxy has met a control plane that names itself.
func NewSyncz(t *track.Tracker, version string) *Syncz { return &Syncz{tracker: t, version: version} }

// Register adds the service to s.
func (z *Syncz) Register(s *grpc.Server) { discoveryv3.RegisterAggregatedDiscoveryServiceServer(s, z) }

// StreamAggregatedResources answers each syncz request but the ACK of an
// answer (a nonce it sent: istio's ADS client, which istioctl uses, makes
// one up for every request it sends), and refuses any other type.
func (z *Syncz) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	sent := ""
	return eachRequest(stream.Recv, func(req *discoveryv3.DiscoveryRequest) error {
		if req.GetTypeUrl() != codec.TypeSyncz {
			return status.Errorf(codes.InvalidArgument, "this listener answers only %s (istioctl proxy-status), not %q", codec.TypeSyncz, codec.Text([]byte(req.GetTypeUrl())))
		}
		if sent != "" && req.GetResponseNonce() == sent {
			return nil // the ACK or NACK of the latest answer
		}
		resp := z.Response()
		if err := stream.Send(resp); err != nil {
			return err
		}
		sent = resp.Nonce
		return nil
	})
}

// Response is the syncz answer for every proxy now.
func (z *Syncz) Response() *discoveryv3.DiscoveryResponse {
	clients := MergeByNode(z.tracker.ClientResources(nil, false))
	resp := &discoveryv3.DiscoveryResponse{TypeUrl: codec.TypeSyncz, VersionInfo: time.Now().UTC().Format(time.RFC3339Nano)}
	resp.Nonce = resp.VersionInfo + "/" + strconv.FormatUint(z.nonce.Add(1), 10)
	identifier := ""
	for _, cl := range clients {
		if identifier == "" && strings.HasPrefix(cl.ControlPlane, "{") {
			identifier = cl.ControlPlane
		}
		cc := &statusv3.ClientConfig{Node: &corev3.Node{Id: cl.Node.ID, Metadata: syncMetadata(cl)}}
		for _, ty := range cl.Types {
			g := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: ty.TypeURL, ConfigStatus: configStatus(ty.State)}
			if ty.LastError != "" {
				g.ErrorState = &adminv3.UpdateFailureState{Details: ty.LastError, LastUpdateAttempt: timestamppb.Now()}
			}
			cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, g)
		}
		a, err := anypb.New(cc)
		if err != nil {
			continue
		}
		resp.Resources = append(resp.Resources, a)
	}
	if identifier == "" {
		b, _ := json.Marshal(map[string]any{"Component": "adstap", "ID": "adstap", "Info": map[string]string{"version": z.version}})
		identifier = string(b)
	}
	resp.ControlPlane = &corev3.ControlPlane{Identifier: identifier}
	return resp
}

// syncMetadata is the node metadata istioctl reads: the namespace (from a
// sidecar's id, TYPE~IP~POD.NAMESPACE~NAMESPACE.svc.DOMAIN) and the Istio
// version.
func syncMetadata(cl NodeResources) *structpb.Struct {
	f := map[string]*structpb.Value{}
	if v := cl.Metadata.IstioVersion; v != "" {
		f["ISTIO_VERSION"] = structpb.NewStringValue(v)
	}
	if parts := strings.Split(cl.Node.ID, "~"); len(parts) == 4 {
		if ns, _, ok := strings.Cut(parts[3], "."); ok && ns != "" {
			f["NAMESPACE"] = structpb.NewStringValue(ns)
		}
	}
	if cl.Node.Cluster != "" {
		f["CLUSTER_ID"] = structpb.NewStringValue(cl.Node.Cluster)
	}
	return &structpb.Struct{Fields: f}
}
