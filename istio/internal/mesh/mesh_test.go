package mesh_test

import (
	"context"
	"testing"
	"time"

	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/istio/internal/mesh"
	"github.com/adstap/adstap/track"
)

func init() { mesh.AuthenticatePlaintext() }

// TestChain runs the chain as deployed: adsc (SotW and Delta) → adstap →
// istiod's engine, and adsc → istio-agent → adstap → istiod's engine, and
// checks that each link is what it says it is.
func TestChain(t *testing.T) {
	leak.Check(t)
	engine := mesh.StartEngine(t, mesh.EngineOptions{
		ConfigString:           mesh.ServiceEntry("httpbin", "httpbin.example.com", "10.1.0.1"),
		KubernetesObjectString: mesh.Service("reviews", "10.96.0.10", "10.2.0.1"),
	})
	tp := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr})
	sotw := mesh.NodeID("sotw", "10.0.0.1")
	delta := mesh.NodeID("delta", "10.0.0.2")
	viaAgent := mesh.NodeID("agent", "10.0.0.3")
	mesh.SotW(t, tp.Addr, "sotw", "10.0.0.1")
	mesh.Delta(t, tp.Addr, "delta", "10.0.0.2", nil)
	agent := mesh.StartAgent(t, mesh.AgentOptions{Discovery: tp.Addr, Workload: "agent", IP: "10.0.0.3", Headers: map[string]string{"x-mesh": "m1"}})
	mesh.Delta(t, agent.Addr, "agent", "10.0.0.3", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Each proxy's EDS is answered through the tap.
	_, err := tp.WaitEvents(ctx, func(evs []track.Event) bool {
		acked := map[string]bool{}
		for _, e := range evs {
			if e, ok := e.(track.PushEnded); ok && e.Result == track.ResultACK && e.Push.Type == "eds" {
				acked[e.Push.Node.ID] = true
			}
		}
		return acked[sotw] && acked[delta] && acked[viaAgent]
	})
	if err != nil {
		t.Fatal(err)
	}
	conns := engine.Connections()
	for _, id := range []string{mesh.ProxyID("sotw"), mesh.ProxyID("delta"), mesh.ProxyID("agent")} {
		if conns[id] == nil {
			t.Errorf("the engine has no connection of %s; it has %v", id, conns)
		}
	}
	page, err := tp.Streams()
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Streams) != 3 {
		t.Errorf("/debug/streams has %d streams, want 3: %+v", len(page.Streams), page.Streams)
	}
	found := false
	for _, md := range engine.Headers.Streams() {
		if v := md.Get("x-mesh"); len(v) == 1 && v[0] == "m1" {
			found = true
		}
	}
	if !found {
		t.Errorf("the engine never saw the agent's x-mesh header: %v", engine.Headers.Streams())
	}
	if n := len(engine.Pushes.All()); n == 0 {
		t.Error("the engine's ledger is empty")
	}
	for _, p := range engine.Pushes.All() {
		t.Log(p)
	}
}
