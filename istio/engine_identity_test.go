package istio_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/internal/inspect"
	"github.com/adstap/adstap/istio/internal/mesh"
)

// TestPushIdentity: two proxies on istiod's engine get a full push, then
// two incremental (endpoint) pushes. Each push round is one trace across
// both proxies, no trace holds two rounds, and adstap inspect tells the
// three apart.
//
// The pinned engine gives every push a new version; released istiod
// versions send an incremental push under the version of the last full
// push. Both are run: the second drives the engine's own push machinery as
// released istiod does (Engine.PushEndpointsAsReleased), so the three
// rounds share one version and only the push id tells them apart.
func TestPushIdentity(t *testing.T) {
	for _, released := range []bool{false, true} {
		name := "development engine: a version per push"
		if released {
			name = "released istiod: incremental pushes reuse the full push's version"
		}
		t.Run(name, func(t *testing.T) {
			leak.Check(t)
			capture := filepath.Join(t.TempDir(), "xds.capture")
			m := startMeshWith(t, nil, mesh.TapOptions{Capture: capture})
			m.engine.Apply(t, mesh.ServiceEntry("ratings", "ratings.example.com", "10.1.0.2"))
			m.waitRounds(t, func(c mesh.Count) bool { return c.Full == 1 })
			for i := range 2 {
				ip := fmt.Sprintf("10.2.0.%d", i+2)
				if released {
					m.engine.PushEndpointsAsReleased(t, "reviews", ip)
				} else {
					m.engine.SetEndpoints(t, "reviews", ip)
				}
				m.waitRounds(t, func(c mesh.Count) bool { return c.Incremental == i+1 })
			}
			m.compare(t, name)
			rounds := mesh.Rounds(m.engine.Pushes.Since(m.pushesBefore))
			var fullVersion string
			versions := map[string]bool{}
			for _, r := range rounds {
				if !r.Request {
					versions[r.Version] = true
				}
				if r.Full && !r.Request {
					fullVersion = r.Version
				}
			}
			wantVersions := 3
			if released {
				wantVersions = 1
			}
			if len(versions) != wantVersions {
				t.Fatalf("the engine's pushes came under %d versions, want %d: %+v", len(versions), wantVersions, rounds)
			}

			// Spans: stopping the tap flushes them, and the capture.
			m.tap.Stop()
			traces := map[string]map[string]bool{} // trace id → push ids
			nodes := map[string]map[string]bool{}  // trace id → nodes
			for _, s := range m.tap.Spans.All() {
				attrs := map[attribute.Key]attribute.Value{}
				for _, a := range s.Attributes() {
					attrs[a.Key] = a.Value
				}
				// The scenario's pushes, not the answers to requests (the
				// clients' syncs, which go to the version's trace).
				if !strings.HasSuffix(s.Name(), " push") || !versions[attrs["xds.version"].AsString()] || s.StartTime().Before(m.start) {
					continue
				}
				id := s.SpanContext().TraceID().String()
				if traces[id] == nil {
					traces[id], nodes[id] = map[string]bool{}, map[string]bool{}
				}
				traces[id][attrs["xds.push_id"].AsString()] = true
				nodes[id][attrs["xds.node.id"].AsString()] = true
			}
			var ids []string
			for trace, pushIDs := range traces {
				t.Logf("%s: trace %s holds push ids %v of nodes %v", name, trace, keys(pushIDs), keys(nodes[trace]))
				if len(pushIDs) != 1 {
					t.Errorf("trace %s mixes push rounds %v", trace, keys(pushIDs))
				}
				if len(nodes[trace]) != 2 {
					t.Errorf("trace %s holds pushes of %v, want both proxies'", trace, keys(nodes[trace]))
				}
				ids = append(ids, keys(pushIDs)...)
			}
			if len(traces) != 3 {
				t.Errorf("the pushes went to %d traces, want 3 (one full push, two incremental)", len(traces))
			}
			if !slices.Contains(ids, fullVersion) {
				t.Errorf("no trace of the full push %s: %v", fullVersion, ids)
			}

			// adstap inspect --push, by version: every round of it, each
			// under its push id.
			var out bytes.Buffer
			seen := map[string]string{}
			for v := range versions {
				out.Reset()
				if err := inspect.Run(context.Background(), inspect.Config{Files: []string{capture}, Push: v, Stdout: &out, Stderr: &out}); err != nil {
					t.Fatalf("inspect --push=%s: %v", v, err)
				}
				for _, line := range strings.Split(out.String(), "\n") {
					if strings.HasPrefix(line, "push ") {
						id, kind, _ := strings.Cut(strings.TrimPrefix(line, "push "), ": ")
						seen[id] = kind
					}
				}
			}
			t.Logf("%s: inspect --push shows %v", name, seen)
			var full, incremental int
			for id, kind := range seen {
				switch {
				case strings.HasPrefix(kind, "full push, ") && id == fullVersion:
					full++
				case strings.HasPrefix(kind, "incremental push, 2 pushes on 2 streams"):
					incremental++
				}
			}
			if full != 1 || incremental != 2 {
				t.Errorf("inspect --push told apart %d full and %d incremental pushes, want 1 and 2:\n%v", full, incremental, seen)
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
