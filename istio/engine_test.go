package istio_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/istio/internal/mesh"
	"github.com/adstap/adstap/track"
)

func init() { mesh.AuthenticatePlaintext() }

// The mesh every engine scenario starts from: an external service and a
// Kubernetes Service with one endpoint.
var (
	baseConfig = mesh.ServiceEntry("httpbin", "httpbin.example.com", "10.1.0.1")
	baseKube   = mesh.Service("reviews", "10.96.0.10", "10.2.0.1")
)

const (
	virtualService = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: httpbin
  namespace: default
spec:
  hosts: [httpbin.example.com]
  http:
  - timeout: 5s
    route:
    - destination: {host: httpbin.example.com}
`
	destinationRule = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: httpbin
  namespace: default
spec:
  host: httpbin.example.com
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: %d}}
`
)

// meshUnderTest is istiod's engine, one adstap in front of it, and a SotW
// and a Delta adsc on the tap, synced.
type meshUnderTest struct {
	engine       *mesh.Engine
	tap          *mesh.Tap
	sotw, delta  string // istiod proxy ids
	sotwNode     string // node ids
	deltaNode    string
	ctx          context.Context
	pushesBefore int // the engine's pushes before the scenario
	eventsBefore int // adstap's events before the scenario
	start        time.Time
}

func startMesh(t *testing.T, check mesh.ClusterCheck) *meshUnderTest {
	t.Helper()
	return startMeshWith(t, check, mesh.TapOptions{})
}

// startMeshWith starts the mesh with a tap configured by opts (its
// upstream and detectors are set here).
func startMeshWith(t *testing.T, check mesh.ClusterCheck, opts mesh.TapOptions) *meshUnderTest {
	t.Helper()
	m := &meshUnderTest{
		sotw: mesh.ProxyID("sotw"), delta: mesh.ProxyID("delta"),
		sotwNode: mesh.NodeID("sotw", "10.0.0.1"), deltaNode: mesh.NodeID("delta", "10.0.0.2"),
	}
	m.engine = mesh.StartEngine(t, mesh.EngineOptions{ConfigString: baseConfig, KubernetesObjectString: baseKube})
	// The defaults, spelled out: more than one full push a minute is the alarm.
	opts.Upstream = m.engine.Addr
	opts.Detect = track.Config{RepeatedFullSyncLimit: 1, RepeatedFullSyncWindow: time.Minute}
	m.tap = mesh.StartTap(t, opts)
	mesh.SotW(t, m.tap.Addr, "sotw", "10.0.0.1")
	mesh.Delta(t, m.tap.Addr, "delta", "10.0.0.2", check)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	m.ctx = ctx
	m.waitSynced(t, m.sotw, m.delta)
	m.pushesBefore = m.engine.Pushes.Len()
	m.eventsBefore = len(m.tap.Events())
	m.start = time.Now()
	return m
}

// waitSynced waits until the engine has answered each proxy's requests for
// CDS, EDS, LDS and RDS, and adstap has seen it all.
func (m *meshUnderTest) waitSynced(t *testing.T, proxies ...string) {
	t.Helper()
	if _, err := m.engine.Pushes.Wait(m.ctx, func(ps []mesh.EnginePush) bool {
		types := map[string]int{}
		for _, p := range ps {
			if p.Request {
				types[p.Proxy+" "+p.TypeURL] = 1
			}
		}
		return len(types) >= 4*len(proxies)
	}); err != nil {
		t.Fatal(err)
	}
	m.waitRelayed(t)
}

// waitRelayed waits until every response the engine generated has crossed
// the tap and been answered: adstap's tracker has one PushSent per engine
// push, per proxy, and no push waits for its answer.
func (m *meshUnderTest) waitRelayed(t *testing.T) {
	t.Helper()
	_, err := m.tap.WaitEvents(m.ctx, func(evs []track.Event) bool {
		engine := map[string]int{}
		for _, p := range m.engine.Pushes.Since(m.pushesBefore) {
			engine[p.Proxy]++
		}
		tap := map[string]int{}
		open := 0
		for _, e := range evs[m.eventsBefore:] {
			switch e := e.(type) {
			case track.PushSent:
				tap[mesh.ProxyOfNode(e.Push.Node.ID)]++
				open++
			case track.PushEnded:
				open--
			}
		}
		for p, n := range engine {
			if tap[p] != n {
				return false
			}
		}
		return open == 0
	})
	if err != nil {
		t.Fatalf("the engine's pushes never all crossed the tap: %v\nengine: %v", err, m.engine.Pushes.All())
	}
}

// waitRounds waits until the engine's rounds since the scenario began meet
// cond for both proxies, and adstap has seen them.
func (m *meshUnderTest) waitRounds(t *testing.T, cond func(mesh.Count) bool) {
	t.Helper()
	if _, err := m.engine.Pushes.Wait(m.ctx, func(ps []mesh.EnginePush) bool {
		c := mesh.CountRounds(ps[m.pushesBefore:])
		return cond(c[m.sotw]) && cond(c[m.delta])
	}); err != nil {
		t.Fatalf("%v\nthe engine's rounds: %+v", err, mesh.Rounds(m.engine.Pushes.Since(m.pushesBefore)))
	}
	m.waitRelayed(t)
}

// compare checks adstap's count of push rounds against the engine's, for
// the pushes since the scenario began, and logs both.
func (m *meshUnderTest) compare(t *testing.T, scenario string) (engine, tap map[string]mesh.Count) {
	t.Helper()
	engine = mesh.CountRounds(m.engine.Pushes.Since(m.pushesBefore))
	tap = mesh.TapRounds(m.tap.Events()[m.eventsBefore:])
	for _, p := range []string{m.sotw, m.delta} {
		e, a := engine[p], tap[p]
		t.Logf("%s, %s: engine full=%d incremental=%d | adstap full=%d incremental=%d", scenario, p, e.Full, e.Incremental, a.Full, a.Incremental)
		if e.Full != a.Full || e.Incremental != a.Incremental {
			t.Errorf("%s, %s: adstap counted full=%d incremental=%d, the engine pushed full=%d incremental=%d\nengine rounds: %+v",
				scenario, p, a.Full, a.Incremental, e.Full, e.Incremental, mesh.Rounds(m.engine.Pushes.Since(m.pushesBefore)))
		}
	}
	return engine, tap
}

// TestConfigChurnIsFullPushes: three config changes (a new ServiceEntry, a
// VirtualService, a DestinationRule) a second apart are three full pushes
// of istiod to each proxy, SotW and Delta; adstap counts each once per
// proxy, names the engine's versions, and raises the repeated-full-sync
// alarm for both nodes.
func TestConfigChurnIsFullPushes(t *testing.T) {
	leak.Check(t)
	m := startMesh(t, nil)
	changes := []string{
		mesh.ServiceEntry("ratings", "ratings.example.com", "10.1.0.2"),
		virtualService,
		fmt.Sprintf(destinationRule, 100),
	}
	for i, c := range changes {
		m.engine.Apply(t, c)
		// Each change is its own push: the next one waits until this one
		// has reached both proxies (more than istiod's 100 ms debounce).
		m.waitRounds(t, func(c mesh.Count) bool { return c.Full > i })
	}
	engine, _ := m.compare(t, "config churn")
	for _, p := range []string{m.sotw, m.delta} {
		if engine[p].Full != len(changes) {
			t.Errorf("the engine made %d full pushes to %s, want %d (one per change)", engine[p].Full, p, len(changes))
		}
	}
	// The versions adstap names are the engine's.
	var engineVersions []string
	for _, r := range mesh.Rounds(m.engine.Pushes.Since(m.pushesBefore)) {
		if r.Full && !r.Request && r.Proxy == m.sotw {
			engineVersions = append(engineVersions, r.Version)
		}
	}
	var tapVersions []string
	for _, e := range m.tap.Events() {
		if e, ok := e.(track.FullPush); ok && e.Node.ID == m.sotwNode {
			tapVersions = append(tapVersions, e.Version)
		}
	}
	if strings.Join(engineVersions, " ") != strings.Join(tapVersions, " ") {
		t.Errorf("full push versions: adstap %v, engine %v", tapVersions, engineVersions)
	}
	// Metrics, /debug/streams and the live log say the same.
	for proto, want := range map[string]float64{"sotw": 3, "delta": 3} {
		if got := m.tap.Metric("adstap_full_pushes_total", map[string]string{"protocol": proto}); got != want {
			t.Errorf("adstap_full_pushes_total{protocol=%q} = %v, want %v", proto, got, want)
		}
	}
	if got := m.tap.Metric("adstap_repeated_full_sync_active", nil); got != 2 {
		t.Errorf("adstap_repeated_full_sync_active = %v, want 2 (both nodes)", got)
	}
	page, err := m.tap.Streams()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Streams {
		if s.FullPushes != 3 {
			t.Errorf("/debug/streams: stream %d (%s) full_pushes = %d, want 3", s.ID, s.NodeID, s.FullPushes)
		}
	}
	if n := len(m.tap.LogLines("full push v=")); n != 6 {
		t.Errorf("the live log has %d full push lines, want 6", n)
	}
	if n := len(m.tap.LogLines("repeated full syncs started")); n != 2 {
		t.Errorf("the live log has %d repeated-full-sync alarms, want 2:\n%s", n, m.tap.Log.String())
	}
}

// TestEndpointChurnIsIncremental: five endpoint-only changes (an
// EndpointSlice update each) are five incremental EDS pushes of istiod to
// each proxy; adstap counts no full push and the alarm stays quiet.
func TestEndpointChurnIsIncremental(t *testing.T) {
	leak.Check(t)
	m := startMesh(t, nil)
	for i := range 5 {
		m.engine.SetEndpoints(t, "reviews", fmt.Sprintf("10.2.0.%d", i+2))
		m.waitRounds(t, func(c mesh.Count) bool { return c.Incremental > i })
	}
	engine, _ := m.compare(t, "endpoint churn")
	for _, p := range []string{m.sotw, m.delta} {
		if engine[p].Incremental != 5 || engine[p].Full != 0 {
			t.Errorf("the engine pushed %+v to %s, want 5 incremental pushes", engine[p], p)
		}
	}
	for _, r := range mesh.Rounds(m.engine.Pushes.Since(m.pushesBefore)) {
		if !r.Request && strings.Join(r.Types, " ") != "envoy.config.endpoint.v3.ClusterLoadAssignment" {
			t.Errorf("an endpoint-only push of %s carried %v, want EDS alone: %+v", r.Proxy, r.Types, r)
		}
	}
	if got := m.tap.Metric("adstap_full_pushes_total", nil); got != 0 {
		t.Errorf("adstap_full_pushes_total = %v under endpoint churn, want 0", got)
	}
	if got := m.tap.Metric("adstap_repeated_full_sync_alarms_total", nil); got != 0 {
		t.Errorf("the repeated-full-sync alarm rose %v times under endpoint churn", got)
	}
}

// TestNACKsOfIstiodPushes: a Delta proxy that rejects the httpbin cluster
// once a DestinationRule shapes it. Five DestinationRule changes are five
// full pushes, each carrying the cluster again, each NACKed with the
// client's message. istiod never re-sends a rejected push on its own (no
// NACK loop, unlike go-control-plane's snapshot cache); the NACKs of five
// config changes within 30 s are a storm.
func TestNACKsOfIstiodPushes(t *testing.T) {
	leak.Check(t)
	const rejected = "outbound|80||httpbin.example.com"
	reject := func(c *cluster.Cluster) error {
		// istiod gives every cluster circuit breakers with huge limits; the
		// DestinationRule's are small.
		if c.Name == rejected && c.GetCircuitBreakers().GetThresholds()[0].GetMaxConnections().GetValue() < 1000 {
			return fmt.Errorf("cluster %s: circuit breakers not supported here", c.Name)
		}
		return nil
	}
	m := startMesh(t, reject)
	for i := range 5 {
		m.engine.Apply(t, fmt.Sprintf(destinationRule, 100+i))
		if _, err := m.engine.Pushes.Wait(m.ctx, func(ps []mesh.EnginePush) bool {
			return mesh.CountRounds(ps[m.pushesBefore:])[m.delta].Full > i
		}); err != nil {
			t.Fatal(err)
		}
		m.waitRelayed(t)
	}
	m.compare(t, "NACKed config churn")
	// The engine sent CDS to the Delta proxy once per change, and adstap saw
	// each NACKed, with the client's words, as istiod recorded them.
	var cdsPushes int
	for _, p := range m.engine.Pushes.Since(m.pushesBefore) {
		if p.Proxy == m.delta && p.TypeURL == cdsURL {
			cdsPushes++
		}
	}
	var nacks []track.PushEnded
	for _, e := range m.tap.Events()[m.eventsBefore:] {
		if e, ok := e.(track.PushEnded); ok && e.Result == track.ResultNACK {
			nacks = append(nacks, e)
		}
	}
	t.Logf("NACKs: engine pushed CDS %d times to %s; adstap saw %d NACKs", cdsPushes, m.delta, len(nacks))
	if cdsPushes != 5 || len(nacks) != 5 {
		t.Fatalf("the engine pushed CDS %d times, adstap saw %d NACKs; want 5 and 5", cdsPushes, len(nacks))
	}
	// adsc repeats its reason once per resource it judged after the
	// rejected one; the message is the client's, whatever it says.
	want := fmt.Sprintf("cluster %s: circuit breakers not supported here", rejected)
	for _, n := range nacks {
		if n.Push.Node.ID != m.deltaNode || n.Push.Type != "cds" || !strings.HasPrefix(n.Error, want) || len(n.ErrorNames) != 1 || n.ErrorNames[0] != rejected {
			t.Errorf("NACK %+v, want the Delta node's CDS rejected with %q naming %s", n, want, rejected)
		}
	}
	last := nacks[len(nacks)-1].Error
	if got := m.engine.Connections()[m.delta][cdsURL].LastError; got != last {
		t.Errorf("istiod recorded the last error %q, adstap %q", got, last)
	}
	page, err := m.tap.Streams()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page.Streams {
		cds := s.Types[cdsURL]
		if s.NodeID == m.deltaNode && (cds.State != "NACKED" || cds.LastError != last || cds.NACKs != 5) {
			t.Errorf("/debug/streams: the Delta stream's CDS is %+v, want NACKED 5 times with %q", cds, last)
		}
	}
	if got := m.tap.Metric("adstap_nack_storms_total", map[string]string{"type": "cds"}); got != 1 {
		t.Errorf("adstap_nack_storms_total{type=cds} = %v, want 1", got)
	}
	if got := m.tap.Metric("adstap_nack_loops_total", map[string]string{"type": "cds"}); got != 0 {
		t.Errorf("adstap_nack_loops_total{type=cds} = %v: istiod does not re-send a rejected push", got)
	}
	var lines []string
	for _, l := range m.tap.LogLines(want) {
		if strings.Contains(l.Msg, " NACK ") {
			lines = append(lines, l.Msg)
		}
	}
	if len(lines) != 5 {
		t.Errorf("the live log has %d NACK lines with the client's message, want 5:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

const cdsURL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// TestEngineRestart: istiod's engine dies and a new one takes its address.
// adstap reports the streams ending, the clients reconnecting through it,
// their new full sync with its duration and phases, and no full push: the
// new engine answers their requests.
func TestEngineRestart(t *testing.T) {
	leak.Check(t)
	m := startMesh(t, nil)
	m.engine.Stop()
	if _, err := m.tap.WaitEvents(m.ctx, func(evs []track.Event) bool {
		closed := 0
		for _, e := range evs[m.eventsBefore:] {
			if _, ok := e.(track.StreamClosed); ok {
				closed++
			}
		}
		return closed == 2
	}); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	closedAt := len(m.tap.Events())
	m.engine = mesh.StartEngine(t, mesh.EngineOptions{ConfigString: baseConfig, KubernetesObjectString: baseKube, Addr: m.engine.Addr})
	m.pushesBefore = 0
	// The full sync settles a second after the last ACK.
	evs, err := m.tap.WaitEvents(m.ctx, func(evs []track.Event) bool {
		n := 0
		for _, e := range evs[m.eventsBefore:] {
			if e, ok := e.(track.FullSyncComplete); ok && e.At.After(restarted) {
				n++
			}
		}
		return n == 2
	})
	if err != nil {
		t.Fatal(err)
	}
	evsBefore := m.eventsBefore
	m.eventsBefore = closedAt
	m.waitRelayed(t)
	engine, tap := m.compare(t, "engine restart")
	m.eventsBefore = evsBefore
	for _, p := range []string{m.sotw, m.delta} {
		if engine[p].Full != 0 || tap[p].Full != 0 {
			t.Errorf("%s: full pushes after the restart: engine %d, adstap %d; want none (a reconnect's sync answers requests)", p, engine[p].Full, tap[p].Full)
		}
	}
	for _, e := range evs[m.eventsBefore:] {
		switch e := e.(type) {
		case track.StreamClosed:
			t.Logf("engine restart: stream %d (%s) closed: code %d %q", e.Stream.ID, e.Node.ID, e.Code, e.Message)
			if e.Code != 14 { // Unavailable
				t.Errorf("stream %d closed with code %d, want Unavailable", e.Stream.ID, e.Code)
			}
		case track.FullSyncComplete:
			if e.At.Before(restarted) {
				continue // the old stream's, settled as it closed
			}
			t.Logf("engine restart: stream %d (%s) full sync in %s after the new engine started: %v", e.StreamID, e.Node.ID, e.Elapsed, e.Types)
			// istio's Delta adsc asks again for clusters and listeners
			// only: the endpoints and routes it had stay subscribed in its
			// own tree (Envoy would ask again).
			if e.At.Before(restarted) || len(e.Types) < 2 {
				t.Errorf("full sync %+v, want at least CDS and LDS, after the restart", e)
			}
		}
	}
	// The spans: each new stream's connect span ends at its full sync,
	// with its phases as children. Stopping the tap flushes them.
	m.tap.Stop()
	phases := map[string]int{}
	for _, s := range m.tap.Spans.All() {
		if s.StartTime().After(restarted) {
			phases[s.Name()]++
			if s.Name() != "connect" && !strings.HasSuffix(s.Name(), " push") {
				t.Logf("engine restart: phase %q took %s", s.Name(), s.EndTime().Sub(s.StartTime()))
			}
		}
	}
	t.Logf("engine restart: spans after the restart: %v", phases)
	for _, name := range []string{"connect", "tcp", "first response", "full sync"} {
		if phases[name] != 2 {
			t.Errorf("%d %q spans after the restart, want 2 (one per stream)", phases[name], name)
		}
	}
}
