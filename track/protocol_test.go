package track_test

import (
	"strings"
	"testing"

	"github.com/adstap/adstap/track"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v2"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/event_reporting/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/health/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/tap/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

func TestProtocolOf(t *testing.T) {
	for method, want := range map[string]track.Protocol{
		adsSotW:  track.SotW,
		adsDelta: track.Delta,
		"/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters":                 track.SotW,
		"/envoy.service.route.v3.VirtualHostDiscoveryService/DeltaVirtualHosts":            track.Delta,
		"/envoy.service.listener.v3.ListenerDiscoveryService/FetchListeners":               track.Opaque,
		"/istio.v1.auth.IstioCertificateService/CreateCertificate":                         track.Opaque,
		"/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus":         track.Opaque,
		"/envoy.service.health.v3.HealthDiscoveryService/StreamHealthCheck":                track.Opaque,
		"/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs":                    track.Opaque,
		"/envoy.service.discovery.v2.AggregatedDiscoveryService/StreamAggregatedResources": track.Opaque,
		"/grpc.health.v1.Health/Watch":                                                     track.Opaque,
		"":                                                                                 track.Opaque,
		"/":                                                                                track.Opaque,
		"StreamAggregatedResources":                                                        track.Opaque,
	} {
		if got := track.ProtocolOf(method); got != want {
			t.Errorf("ProtocolOf(%q) = %q, want %q", method, got, want)
		}
	}
}

// Every streaming method of Envoy's v3 services is SotW exactly when it
// carries DiscoveryRequest, Delta when DeltaDiscoveryRequest: checked
// against the service descriptors go-control-plane registers.
func TestProtocolOfMatchesServiceDescriptors(t *testing.T) {
	checked := map[track.Protocol]int{}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			if !strings.HasPrefix(string(sd.FullName()), "envoy.service.") {
				continue
			}
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				method := "/" + string(sd.FullName()) + "/" + string(md.Name())
				want := track.Opaque
				if md.IsStreamingClient() && md.IsStreamingServer() {
					switch md.Input().FullName() {
					case "envoy.service.discovery.v3.DiscoveryRequest":
						want = track.SotW
					case "envoy.service.discovery.v3.DeltaDiscoveryRequest":
						want = track.Delta
					}
				}
				if got := track.ProtocolOf(method); got != want {
					t.Errorf("ProtocolOf(%q) = %q, want %q", method, got, want)
				}
				checked[want]++
			}
		}
		return true
	})
	t.Logf("checked %v", checked)
	// ADS plus eight per-type services in SotW, ten with VHDS and LEDS in Delta.
	if checked[track.SotW] < 9 || checked[track.Delta] < 11 || checked[track.Opaque] < 10 {
		t.Errorf("checked %v methods: the service packages did not register", checked)
	}
}
