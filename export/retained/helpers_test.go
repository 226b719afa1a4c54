package retained_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/codec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const (
	nodeA = "sidecar~10.0.0.1~reviews-v1-7f9c.default~default.svc.cluster.local"
	ads   = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
)

// cdsAnswer is the ACK (or, with nack, the NACK) of the CDS push of
// version, whose nonce is "n" and the version.
func cdsAnswer(version, nack string) *codec.Request {
	req := &codec.Request{TypeURL: codec.TypeCluster, ResponseNonce: "n" + version, VersionInfo: version}
	if nack != "" {
		req.ErrorDetail = &codec.ErrorDetail{Code: 3, Message: nack}
	}
	return req
}

// decodedPush is raw as the tap hands a push to the tracker.
func decodedPush(t testing.TB, raw []byte) (*codec.Response, mem.BufferSlice) {
	t.Helper()
	data := mem.BufferSlice{mem.SliceBuffer(raw)}
	var resp codec.Response
	if err := resp.DecodeBuffers(data, false); err != nil {
		t.Fatal(err)
	}
	return &resp, data
}
