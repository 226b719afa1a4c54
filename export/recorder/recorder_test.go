package recorder_test

import (
	"bytes"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/recorder"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ads is the method of an ADS stream.
const ads = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"

// countingPool is gRPC's buffer pool as far as a test can see it: it
// counts the buffers given back, which happens when the last reference to
// one is let go.
type countingPool struct{ returned atomic.Int64 }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.returned.Add(1) }

// received is msg as the relay holds it: in buffers of 16 KB, as gRPC
// receives a large message, each with one reference.
func received(msg []byte, pool mem.BufferPool) mem.BufferSlice {
	var data mem.BufferSlice
	for _, seg := range xdstest.Chunk(msg, 16<<10) {
		data = append(data, mem.NewBuffer(&seg, pool))
	}
	return data
}

// readCapture reads every record of a capture's files, oldest first.
func readCapture(t *testing.T, path string, maxFiles int) []capture.Record {
	t.Helper()
	var recs []capture.Record
	for _, name := range capture.Files(path, maxFiles) {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		rd := capture.NewReader(f, name)
		for {
			r, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		f.Close()
	}
	return recs
}

// TestCaptureOfA40MBPushHoldsNoSecretAndEveryOtherByte captures a CDS push
// of 40 MB — 40,000 clusters, four of them with an inline TLS key in their
// transport socket, Any-wrapped as Envoy reads it — with the injection
// template's capture settings (a queue of 16 MiB, files of 32 MiB): the
// push, larger than the queue, is written whole from the buffers it came
// in, which are all let go afterwards; no key is left in the capture;
// every other cluster is there byte for byte.
func TestCaptureOfA40MBPushHoldsNoSecretAndEveryOtherByte(t *testing.T) {
	leakcheck.Check(t)
	kp := xdstest.NewCA(t).Issue(t, "workload", nil, nil, false)
	keyed := map[int]bool{7: true, 12_345: true, 23_456: true, 39_999: true}
	resources := xdsconfig.KeyedClusters(40_000, 1_000, slices.Collect(maps.Keys(keyed)), kp.CertPEM, kp.KeyPEM)
	push := xdstest.MustMarshal(&discovery.DiscoveryResponse{VersionInfo: "v1", TypeUrl: codec.TypeCluster, Nonce: "1", Resources: resources})
	if len(push) < 40_000_000 {
		t.Fatalf("the push is %d bytes, want 40 MB", len(push))
	}

	path := filepath.Join(t.TempDir(), "xds.capture")
	w, err := capture.NewWriter(path, 32<<20, 4, "test", "istiod:15012")
	if err != nil {
		t.Fatal(err)
	}
	c := recorder.New(recorder.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.DiscardHandler), QueueBytes: 16 << 20}, Writer: w})
	var pool countingPool
	data := received(push, &pool)
	at := time.Now()
	c.Record(capture.Record{Time: at, Kind: capture.KindOpen, Stream: 1, Method: ads, Protocol: string(codec.SotW)})
	data.Ref() // the capture's reference; the relay lets go of its own at once
	c.Frame(capture.Record{Time: at, Kind: capture.KindFrame, Stream: 1, Direction: "response", Size: len(push)}, data)
	data.Free()
	c.Record(capture.Record{Time: at, Kind: capture.KindClose, Stream: 1, Code: "OK"})
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := pool.returned.Load(); got != int64(len(data)) {
		t.Errorf("%d of the push's %d buffers were given back to gRPC's pool", got, len(data))
	}
	if c.Dropped() != 0 {
		t.Errorf("%d records dropped", c.Dropped())
	}

	recs := readCapture(t, path, 4)
	var frame *capture.Record
	for i := range recs {
		if recs[i].Kind == capture.KindFrame {
			frame = &recs[i]
		}
	}
	if frame == nil || !frame.Redacted || frame.TypeURL != codec.TypeCluster || frame.Size != len(push) {
		t.Fatalf("the push's record: %+v", frame)
	}
	for i := 0; i+32 <= len(kp.KeyPEM); i += 16 {
		if bytes.Contains(frame.Message, kp.KeyPEM[i:i+32]) {
			t.Fatalf("key bytes %d-%d are in the capture", i, i+32)
		}
	}
	var got discovery.DiscoveryResponse
	if err := proto.Unmarshal(frame.Message, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Resources) != len(resources) {
		t.Fatalf("%d clusters captured, want %d", len(got.Resources), len(resources))
	}
	for i, r := range got.Resources {
		same := bytes.Equal(r.Value, resources[i].Value)
		switch {
		case keyed[i] && (same || !bytes.Contains(r.Value, []byte("[redacted by adstap: sha256 "))):
			t.Errorf("cluster %d: its key is not replaced by its fingerprint", i)
		case !keyed[i] && !same:
			t.Errorf("cluster %d: changed by redaction, with no secret in it", i)
		}
	}
}
