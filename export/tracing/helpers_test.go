package tracing_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const (
	nodeA = "sidecar~10.0.0.1~reviews-v1-7f9c.default~default.svc.cluster.local"
	nodeB = "router~10.0.0.9~gateway-5d8b.istio-system~istio-system.svc.cluster.local"
	ads   = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
)
