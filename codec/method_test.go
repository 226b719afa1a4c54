package codec_test

import (
	"strings"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
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
	leakcheck.Check(t)
	for method, want := range map[string]codec.Protocol{
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources": codec.SotW,
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources":  codec.Delta,
		"/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters":                 codec.SotW,
		"/envoy.service.route.v3.VirtualHostDiscoveryService/DeltaVirtualHosts":            codec.Delta,
		"/envoy.service.listener.v3.ListenerDiscoveryService/FetchListeners":               codec.Opaque,
		"/istio.v1.auth.IstioCertificateService/CreateCertificate":                         codec.Opaque,
		"/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus":         codec.Opaque,
		"/envoy.service.health.v3.HealthDiscoveryService/StreamHealthCheck":                codec.Opaque,
		"/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs":                    codec.Opaque,
		"/envoy.service.discovery.v2.AggregatedDiscoveryService/StreamAggregatedResources": codec.Opaque,
		"/grpc.health.v1.Health/Watch":                                                     codec.Opaque,
		"":                                                                                 codec.Opaque,
		"/":                                                                                codec.Opaque,
		"StreamAggregatedResources":                                                        codec.Opaque,
	} {
		if got := codec.ProtocolOf(method); got != want {
			t.Errorf("ProtocolOf(%q) = %q, want %q", method, got, want)
		}
	}
}

// Every streaming method of Envoy's v3 services is SotW exactly when it
// carries DiscoveryRequest, Delta when DeltaDiscoveryRequest: checked
// against the service descriptors go-control-plane registers.
func TestProtocolOfMatchesServiceDescriptors(t *testing.T) {
	leakcheck.Check(t)
	checked := map[codec.Protocol]int{}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			if !strings.HasPrefix(string(sd.FullName()), "envoy.service.") {
				continue
			}
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				method := "/" + string(sd.FullName()) + "/" + string(md.Name())
				want := codec.Opaque
				if md.IsStreamingClient() && md.IsStreamingServer() {
					switch md.Input().FullName() {
					case "envoy.service.discovery.v3.DiscoveryRequest":
						want = codec.SotW
					case "envoy.service.discovery.v3.DeltaDiscoveryRequest":
						want = codec.Delta
					}
				}
				if got := codec.ProtocolOf(method); got != want {
					t.Errorf("ProtocolOf(%q) = %q, want %q", method, got, want)
				}
				checked[want]++
			}
		}
		return true
	})
	t.Logf("checked %v", checked)
	// ADS plus eight per-type services in SotW, ten with VHDS and LEDS in Delta.
	if checked[codec.SotW] < 9 || checked[codec.Delta] < 11 || checked[codec.Opaque] < 10 {
		t.Errorf("checked %v methods: the service packages did not register", checked)
	}
}
