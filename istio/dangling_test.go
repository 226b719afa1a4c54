package istio_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/istio/internal/mesh"
	"github.com/adstap/adstap/track"
)

// The articles' 90/10 split of reviews between subsets v1 and v2, and the
// most common Istio mistake: a DestinationRule that defines v1 only.
var (
	reviewsEntry = serviceEntryHead("reviews", 9080) + `  endpoints:
  - {address: 10.1.0.1, labels: {version: v1}}
  - {address: 10.1.0.2, labels: {version: v2}}
`
	reviewsSplit = `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews-split
  namespace: default
spec:
  hosts: [reviews.default.svc.cluster.local]
  http:
  - route:
    - destination: {host: reviews.default.svc.cluster.local, subset: v1}
      weight: 90
    - destination: {host: reviews.default.svc.cluster.local, subset: v2}
      weight: 10
`
	reviewsV1Only = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: default
spec:
  host: reviews.default.svc.cluster.local
  subsets:
  - {name: v1, labels: {version: v1}}
`
	reviewsBoth = reviewsV1Only + `  - {name: v2, labels: {version: v2}}
`
	// ratings has no endpoint: every request to it fails with 503 UH.
	ratingsEmpty = serviceEntryHead("ratings", 9080) + `  workloadSelector:
    labels: {app: ratings}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: ratings
  namespace: default
spec:
  host: ratings.default.svc.cluster.local
  trafficPolicy:
    connectionPool: {tcp: {maxConnections: 10}}
`
)

// serviceEntryHead is a mesh-internal ServiceEntry of name.default on an
// HTTP port, with static resolution; its endpoints or selector follow.
func serviceEntryHead(name string, port int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %[1]s
  namespace: default
spec:
  hosts: [%[1]s.default.svc.cluster.local]
  ports:
  - {number: %[2]d, name: http, protocol: HTTP}
  resolution: STATIC
  location: MESH_INTERNAL
`, name, port)
}

const (
	missingV2    = "outbound|9080|v2|reviews.default.svc.cluster.local"
	emptyRatings = "outbound|9080||ratings.default.svc.cluster.local"
)

// TestRoutesToNowhere: istiod's engine routes 10% of reviews to subset v2,
// which the DestinationRule does not define, so it never sends that cluster.
// Istio's own ADS client accepts everything through adstap, SotW and Delta;
// adstap reports the route that sends 10% to nowhere with its
// VirtualService, and the ServiceEntry without endpoints (503 UH) with its
// DestinationRule. Adding subset v2 clears the first.
func TestRoutesToNowhere(t *testing.T) {
	leak.Check(t)
	for _, delta := range []bool{false, true} {
		name := "SotW"
		if delta {
			name = "Delta"
		}
		t.Run(name, func(t *testing.T) {
			engine := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: strings.Join([]string{reviewsEntry, reviewsSplit, reviewsV1Only, ratingsEmpty}, "---\n")})
			// What the clients wait for (routes, endpoints) comes within
			// the grace, even on a loaded machine.
			tp := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr, ReferencesGrace: 10 * time.Second})
			if delta {
				mesh.Delta(t, tp.Addr, "productpage", "10.0.0.7", nil)
			} else {
				mesh.SotW(t, tp.Addr, "productpage", "10.0.0.7")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			found, err := tp.WaitDangling(ctx, func(d []references.DanglingReference) bool {
				return findRef(d, "route_cluster", missingV2) != nil && findRef(d, "cluster_unhealthy", emptyRatings) != nil
			})
			if err != nil {
				t.Fatalf("%v\n%s", err, tp.Log)
			}
			route := findRef(found, "route_cluster", missingV2)
			if route.Share != 0.1 || route.IstioConfig == nil || route.IstioConfig.Kind != "VirtualService" ||
				route.IstioConfig.Namespace+"/"+route.IstioConfig.Name != "default/reviews-split" {
				t.Errorf("the route to %s: %+v, want 10%% from VirtualService default/reviews-split", missingV2, route)
			}
			uh := findRef(found, "cluster_unhealthy", emptyRatings)
			if uh.IstioConfig == nil || uh.IstioConfig.Kubectl != "kubectl get destinationrule -n default ratings" || !strings.Contains(uh.Summary, "503 UH") {
				t.Errorf("the cluster without endpoints: %+v, want 503 UH from DestinationRule default/ratings", uh)
			}
			lines := tp.LogLines("dangling reference on stream")
			if l := lineWith(lines, missingV2); l == "" || !strings.Contains(l, "sends 10% of its traffic to cluster "+missingV2) ||
				!strings.Contains(l, "— from VirtualService default/reviews-split") {
				t.Errorf("no live log line for the route to %s with its share and VirtualService:\n%s", missingV2, tp.Log)
			}
			if l := lineWith(lines, emptyRatings); !strings.Contains(l, "503 UH — from DestinationRule default/ratings") {
				t.Errorf("no live log line for %s with its DestinationRule:\n%s", emptyRatings, tp.Log)
			}
			if v := tp.Metric("adstap_dangling_references", map[string]string{"kind": "route_cluster"}); v != 1 {
				t.Errorf(`adstap_dangling_references{kind="route_cluster"} = %v, want 1`, v)
			}

			engine.Apply(t, reviewsBoth)
			if _, err := tp.WaitDangling(ctx, func(d []references.DanglingReference) bool {
				return findRef(d, "route_cluster", missingV2) == nil
			}); err != nil {
				t.Fatalf("adding subset v2 did not clear the route: %v\n%s", err, tp.Log)
			}
			resolved := lineWith(tp.LogLines("dangling reference resolved"), missingV2)
			if !strings.Contains(resolved, "-> cluster "+missingV2+": the target arrived") {
				t.Errorf("no resolved line for the route to %s:\n%s", missingV2, tp.Log)
			}
			for _, l := range append(tp.LogLines("dangling reference"), tp.LogLines("make-before-break")...) {
				t.Logf("live log: %s", l.Msg)
			}

			// The span events, once flushed.
			tp.Stop()
			if !spanEvent(tp, "dangling reference", missingV2) || !spanEvent(tp, "dangling reference resolved", missingV2) {
				t.Errorf("no span event for the route to %s found and resolved", missingV2)
			}
		})
	}
}

// TestNoDanglingReferencesInAHealthyMesh: 50 services, each split 80/20
// between two subsets its DestinationRule defines, Kubernetes Services, a
// TCP service and Istio's passthrough and blackhole clusters: through
// adstap to SotW and Delta clients, nothing dangles, even past the grace.
// Nor do the routes istiod puts in its port-80 route configuration for
// every VirtualService whose host has no port 80 (each of the 50 here).
func TestNoDanglingReferencesInAHealthyMesh(t *testing.T) {
	leak.Check(t)
	var config []string
	for i := range 50 {
		host := fmt.Sprintf("svc-%02d.default.svc.cluster.local", i)
		config = append(config, serviceEntryHead(fmt.Sprintf("svc-%02d", i), 8080)+fmt.Sprintf(`  endpoints:
  - {address: 10.3.%[1]d.1, labels: {version: v1}}
  - {address: 10.3.%[1]d.2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: svc-%02[1]d
  namespace: default
spec:
  host: %[2]s
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: svc-%02[1]d
  namespace: default
spec:
  hosts: [%[2]s]
  http:
  - route:
    - destination: {host: %[2]s, subset: v1}
      weight: 80
    - destination: {host: %[2]s, subset: v2}
      weight: 20
`, i, host))
	}
	config = append(config, `apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: mysql
  namespace: default
spec:
  hosts: [mysql.default.svc.cluster.local]
  ports:
  - {number: 3306, name: tcp, protocol: TCP}
  resolution: STATIC
  location: MESH_INTERNAL
  endpoints:
  - {address: 10.4.0.1}
`, mesh.ServiceEntry("httpbin", "httpbin.example.com", "10.1.0.1"))
	var kube []string
	for i := range 5 {
		kube = append(kube, mesh.Service(fmt.Sprintf("kube-%d", i), fmt.Sprintf("10.96.1.%d", i+1), fmt.Sprintf("10.5.%d.1", i)))
	}
	engine := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: strings.Join(config, "---\n"), KubernetesObjectString: strings.Join(kube, "---\n")})
	tp := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr, ReferencesGrace: 10 * time.Second})
	mesh.SotW(t, tp.Addr, "sotw", "10.0.0.1")
	mesh.Delta(t, tp.Addr, "delta", "10.0.0.2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := tp.WaitEvents(ctx, func(evs []track.Event) bool {
		synced := 0
		for _, e := range evs {
			if _, ok := e.(track.FullSyncComplete); ok {
				synced++
			}
		}
		return synced == 2
	}); err != nil {
		t.Fatalf("the clients never synced: %v", err)
	}
	// Past the grace for everything the clients wait for.
	tp.Tick(time.Now().Add(time.Minute))
	page, err := tp.Streams()
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Streams) != 2 {
		t.Fatalf("%d streams, want 2", len(page.Streams))
	}
	for _, s := range page.Streams {
		for url, ts := range s.Types {
			t.Logf("stream %d (%s) %s: %s, %d resources", s.ID, s.Protocol, ts.Type, ts.State, ts.Resources)
			if ts.State != "SYNCED" {
				t.Errorf("stream %d %s is %s, want SYNCED", s.ID, url, ts.State)
			}
		}
	}
	if page.Dangling == nil {
		t.Fatal("/debug/streams has no dangling_references: references are not checked")
	}
	if len(page.Dangling) != 0 {
		t.Errorf("a healthy mesh has dangling references: %+v", page.Dangling)
	}
	if lines := tp.LogLines("dangling reference"); len(lines) != 0 {
		t.Errorf("the live log reports dangling references: %+v", lines)
	}
	if v := tp.Metric("adstap_dangling_references_total", nil); v != 0 {
		t.Errorf("adstap_dangling_references_total = %v, want 0", v)
	}
}

func findRef(refs []references.DanglingReference, kind, target string) *references.DanglingReference {
	for i := range refs {
		if refs[i].Kind == kind && (refs[i].Target == target || refs[i].Owner == target) {
			return &refs[i]
		}
	}
	return nil
}

func lineWith(lines []mesh.LogLine, substr string) string {
	for _, l := range lines {
		if strings.Contains(l.Msg, substr) {
			return l.Msg
		}
	}
	return ""
}

// spanEvent reports whether a span has an event of that name about target.
func spanEvent(tp *mesh.Tap, name, target string) bool {
	for _, s := range tp.Spans.All() {
		for _, e := range s.Events() {
			if e.Name != name {
				continue
			}
			for _, a := range e.Attributes {
				if a.Key == "xds.reference.target" && a.Value.AsString() == target {
					return true
				}
			}
		}
	}
	return false
}
