package references_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const (
	node = "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local"
	ads  = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
)
