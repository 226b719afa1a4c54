package istio_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/istio/internal/mesh"
	"github.com/adstap/adstap/track"
)

// TestThroughIstioAgent: client → istio-agent → adstap → istiod's engine,
// the chain of a sidecar whose agent dials adstap. adstap sees one stream,
// under the client's node id, carrying the client's requests and the
// agent's own (NDS for its DNS proxy, PCDS for its trust bundle); istiod
// gets the agent's headers untouched; and when adstap restarts, the agent
// reconnects and adstap reports the new full sync.
func TestThroughIstioAgent(t *testing.T) {
	leak.Check(t)
	engine := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: baseConfig, KubernetesObjectString: baseKube})
	tp := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr})
	agent := mesh.StartAgent(t, mesh.AgentOptions{
		Discovery: tp.Addr, Workload: "app", IP: "10.0.0.3", DNS: true,
		Headers: map[string]string{"x-mesh-id": "mesh-1"},
		// The workload is healthy when the tap's admin port answers.
		Probe: strings.TrimPrefix(tp.Admin, "http://"),
	})
	// Envoy's bootstrap says DNS_CAPTURE when the agent proxies DNS; istiod
	// builds the name table only then.
	mesh.Delta(t, agent.Addr, "app", "10.0.0.3", nil, mesh.Meta{"DNS_CAPTURE": "true"})
	node, proxy := mesh.NodeID("app", "10.0.0.3"), mesh.ProxyID("app")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The agent's own NDS request is answered by istiod, through adstap.
	if _, err := engine.Pushes.Wait(ctx, func(ps []mesh.EnginePush) bool {
		for _, p := range ps {
			if p.Proxy == proxy && p.TypeURL == codec.TypeNameTable {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	// ... and the agent reports the workload healthy, and the proxy's full
	// sync completes all the same (the agent's types are not waited for).
	evs, err := tp.WaitEvents(ctx, func(evs []track.Event) bool {
		var nds, health, synced bool
		for _, e := range evs {
			switch e := e.(type) {
			case track.PushEnded:
				nds = nds || e.Push.TypeURL == codec.TypeNameTable && e.Result == track.ResultACK
			case track.RequestSeen:
				health = health || e.TypeURL == codec.TypeHealthInfo
			case track.FullSyncComplete:
				synced = true
			}
		}
		return nds && health && synced
	})
	if err != nil {
		t.Fatal(err)
	}
	asked := map[string]int{}
	for _, e := range evs {
		if e, ok := e.(track.RequestSeen); ok {
			asked[codec.ShortType(e.TypeURL)]++
			if e.Node.ID != node {
				t.Errorf("a request of %s attributed to %q, want the client's node %q", e.TypeURL, e.Node.ID, node)
			}
		}
	}
	t.Logf("through istio-agent: requests by type: %v", asked)
	if asked["nds"] == 0 || asked["pcds"] == 0 || asked["health"] == 0 {
		t.Errorf("adstap saw no NDS, PCDS or health request from the agent: %v", asked)
	}
	page, err := tp.Streams()
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Streams) != 1 || page.Streams[0].NodeID != node {
		t.Fatalf("/debug/streams: %+v, want one stream of %s", page.Streams, node)
	}
	types := page.Streams[0].Types
	// NDS: asked for by the agent, answered by istiod, acknowledged by the
	// agent. PCDS: asked for by the agent; istiod answers only in meshes
	// with several roots (MULTI_ROOT_MESH).
	if nds := types[codec.TypeNameTable]; nds == nil || nds.State != "SYNCED" {
		t.Errorf("the agent's NDS is %+v, want SYNCED", nds)
	}
	if pcds := types[codec.TypeProxyConfig]; pcds == nil || pcds.State != "NOT_SENT" {
		t.Errorf("the agent's PCDS is %+v, want NOT_SENT", pcds)
	}
	// Health: requests only, which istiod takes in and never answers.
	if health := types[codec.TypeHealthInfo]; health == nil || health.State != "NOT_SENT" {
		t.Errorf("the agent's health reports are %+v, want NOT_SENT", health)
	}
	if page.Streams[0].FullSyncSeconds == nil {
		t.Error("/debug/streams: no full sync for the proxy behind the agent")
	}
	if w := engine.Connections()[proxy][codec.TypeProxyConfig]; w.NonceSent != "" {
		t.Errorf("istiod sent PCDS (%+v): the test's reading of istiod is wrong", w)
	}

	// The agent's headers reach istiod as it sent them.
	var seen bool
	for _, md := range engine.Headers.Streams() {
		if v := md.Get("x-mesh-id"); len(v) == 1 && v[0] == "mesh-1" {
			seen = true
			if c := md.Get("clusterid"); len(c) != 1 || c[0] != mesh.ClusterID {
				t.Errorf("istiod got ClusterID %v, want [%s]", c, mesh.ClusterID)
			}
		}
	}
	if !seen {
		t.Errorf("istiod never saw the agent's x-mesh-id header: %v", engine.Headers.Streams())
	}

	// adstap restarts on the same address: the agent reconnects, and the
	// new adstap reports the new stream's full sync. istiod answers the
	// requests of a reconnect: no full push.
	pushesBefore := engine.Pushes.Len()
	addr := tp.Addr
	tp.Stop()
	restarted := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr, Listen: addr})
	evs, err = restarted.WaitEvents(ctx, func(evs []track.Event) bool {
		for _, e := range evs {
			if _, ok := e.(track.FullSyncComplete); ok {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch e := e.(type) {
		case track.FullSyncComplete:
			t.Logf("through istio-agent, adstap restarted: stream %d (%s) full sync in %s: %v", e.StreamID, e.Node.ID, e.Elapsed, e.Types)
			if e.Node.ID != node {
				t.Errorf("full sync of %q, want %q", e.Node.ID, node)
			}
		case track.FullPush:
			t.Errorf("a full push after adstap restarted: %+v", e)
		}
	}
	for _, r := range mesh.Rounds(engine.Pushes.Since(pushesBefore)) {
		if !r.Request {
			t.Errorf("istiod pushed %+v after adstap restarted, want answers to requests only", r)
		}
	}
}
