package istio_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/internal/inspect"
	"github.com/adstap/adstap/internal/replay"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/istio/internal/mesh"
	"github.com/adstap/adstap/track"
)

// captureMaglevNACK runs istiod's engine behind a tap with capture on; a
// Delta proxy syncs, then a DestinationRule asking for Maglev arrives and
// the proxy rejects the cluster istiod builds from it. It returns the
// capture and the NACK as the tap saw it.
func captureMaglevNACK(t *testing.T) (string, track.PushEnded) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "xds.capture")
	engine := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: shopConfig})
	tp := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr, Capture: path})
	mesh.Delta(t, tp.Addr, "productpage", "10.0.0.7", rejectMaglev)
	nack := nackAfterSync(t, tp, func() { engine.Apply(t, maglevRule) }, v3.ClusterType)
	tp.Stop()
	return path, nack
}

// replayTo serves sent on a loopback port to the client connect starts,
// and returns the outcome and what the replay printed.
func replayTo(t *testing.T, sent *inspect.Sent, connect func(addr string)) (*replay.Outcome, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var out syncbuf.Buffer
	type result struct {
		o   *replay.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		o, err := replay.Serve(context.Background(), replay.ServeConfig{Sent: sent, Listener: lis, Settle: 2 * time.Second, Out: &out})
		done <- result{o, err}
	}()
	connect(lis.Addr().String())
	select {
	case r := <-done:
		t.Logf("replay:\n%s", out.String())
		if r.err != nil {
			t.Fatalf("replay: %v", r.err)
		}
		return r.o, out.String()
	case <-time.After(60 * time.Second):
		t.Fatalf("the replay did not end:\n%s", out.String())
	}
	return nil, ""
}

// TestReplayReproducesTheDestinationRuleNACK: the capture of a proxy that
// rejected the cluster of a DestinationRule, replayed as of the rejected
// version to istio's own ADS clients. The Delta client rejects it again,
// with the same words, and the replay names the DestinationRule. The SotW
// client (adsc.ADSC) ACKs every response it gets — istio's ADSC has no way
// to NACK ("TODO: add hook to inject nacks") — so what it shows is that it
// was served the DestinationRule's cluster, byte for byte, in SotW
// envelopes, and the replay says the capture NACKed it.
func TestReplayReproducesTheDestinationRuleNACK(t *testing.T) {
	leak.Check(t)
	path, nack := captureMaglevNACK(t)
	node := mesh.NodeID("productpage", "10.0.0.7")
	sent, err := inspect.ReadSent(context.Background(), []string{path}, node, inspect.Point{Version: nack.Push.Version}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cds := sent.Type(v3.ClusterType)
	if cds == nil || cds.Result != track.ResultNACK || cds.Error != nack.Error {
		t.Fatalf("as of %s, CDS is %+v, want the NACK %q", nack.Push.Version, cds, nack.Error)
	}
	const source = "from DestinationRule shop/reviews-maglev"

	t.Run("Delta", func(t *testing.T) {
		o, out := replayTo(t, sent, func(addr string) {
			mesh.Delta(t, addr, "productpage", "10.0.0.7", rejectMaglev)
		})
		var got *replay.Rejected
		for i, r := range o.Rejected {
			if r.TypeURL == v3.ClusterType {
				got = &o.Rejected[i]
			}
		}
		// The message is the client's for the whole push: the replay's
		// first push holds every cluster where istiod's held the changed
		// ones, and adsc repeats its reason for each resource after the
		// rejected one.
		want := rejectMaglev(&cluster.Cluster{Name: maglevCluster, LbPolicy: cluster.Cluster_MAGLEV}).Error()
		if got == nil || !strings.Contains(got.Message, want) || !strings.Contains(nack.Error, want) || got.Source != source {
			t.Fatalf("rejected %+v, want CDS with %q %s (captured: %q)", o.Rejected, want, source, nack.Error)
		}
		if !strings.Contains(out, " NACK ") || !strings.Contains(out, "— "+source) {
			t.Errorf("the replay's NACK line does not name the DestinationRule")
		}
	})

	t.Run("SotW", func(t *testing.T) {
		var client interface {
			GetEdsClusters() map[string]*cluster.Cluster
		}
		o, out := replayTo(t, sent, func(addr string) {
			client = mesh.SotW(t, addr, "productpage", "10.0.0.7")
		})
		if len(o.Rejected) != 0 {
			t.Errorf("istio's SotW client rejected %+v: it cannot", o.Rejected)
		}
		c := client.GetEdsClusters()[maglevCluster]
		path := c.GetMetadata().GetFilterMetadata()["istio"].GetFields()["config"].GetStringValue()
		if c.GetLbPolicy() != cluster.Cluster_MAGLEV || path != "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews-maglev" {
			t.Errorf("the SotW client got %s with lb policy %v from %q, want the DestinationRule's Maglev cluster", maglevCluster, c.GetLbPolicy(), path)
		}
		if !strings.Contains(out, "NACKed in the capture: "+nack.Error) || !strings.Contains(out, "the capture is Delta and this client speaks SotW") {
			t.Errorf("the replay does not say what the capture holds")
		}
	})

	// The bootstrap for envoy -c: the proxy's node, metadata included, and
	// istio-agent's SDS cluster, which istiod's clusters refer to.
	y, err := inspect.Bootstrap(sent, "127.0.0.1:15010")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v\n%s", err, y)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	md := b.GetNode().GetMetadata().GetFields()
	if b.GetNode().GetId() != node || md["NAMESPACE"].GetStringValue() != mesh.Namespace || md["ISTIO_VERSION"] == nil {
		t.Errorf("bootstrap node %v, want %s with its metadata", b.GetNode(), node)
	}
	if cs := b.GetStaticResources().GetClusters(); len(cs) != 2 || cs[1].GetName() != "sds-grpc" ||
		b.GetDynamicResources().GetAdsConfig().GetApiType().String() != "DELTA_GRPC" {
		t.Errorf("bootstrap %v, want Delta ADS and the sds-grpc cluster", &b)
	}
}
