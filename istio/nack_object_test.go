package istio_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	networking "istio.io/api/networking/v1alpha3"

	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/istio/internal/mesh"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// The shop: two services outside Kubernetes on port 9080 and a good
// VirtualService for one of them, so that the route configuration of port
// 9080 gathers the routes of two VirtualServices once the bad one comes.
// The tests add a DestinationRule asking for Maglev hashing (Envoy has it,
// grpc-go's xDS client does not) or a VirtualService whose URI regex does
// not compile.
var shopConfig = shopService("reviews", "10.1.0.9") + "---\n" + shopService("ratings", "10.1.0.10") + `---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
  namespace: shop
spec:
  hosts: [reviews.shop.example.com]
  http:
  - name: reviews-timeout
    timeout: 5s
    route:
    - destination:
        host: reviews.shop.example.com
`

// shopService is a ServiceEntry for NAME.shop.example.com, port 9080 (http),
// inside the mesh, with one endpoint.
func shopService(name, ip string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %[1]s
  namespace: shop
spec:
  hosts: [%[1]s.shop.example.com]
  ports:
  - {number: 9080, name: http, protocol: HTTP}
  resolution: STATIC
  location: MESH_INTERNAL
  endpoints:
  - address: %[2]s
`, name, ip)
}

const maglevRule = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews-maglev
  namespace: shop
spec:
  host: reviews.shop.example.com
  trafficPolicy:
    loadBalancer:
      consistentHash:
        httpHeaderName: x-user
        maglev:
          tableSize: 65537
`

// badRegexRoute is a VirtualService whose URI regex does not compile. Istio's
// validation refuses it (so the engine's YAML parser would); it is put in
// the engine's store directly, as an apply that bypassed the webhook would.
func badRegexRoute() config.Config {
	return config.Config{
		Meta: config.Meta{GroupVersionKind: gvk.VirtualService, Name: "ratings-v1", Namespace: "shop"},
		Spec: &networking.VirtualService{
			Hosts: []string{"ratings.shop.example.com"},
			Http: []*networking.HTTPRoute{{
				Name:  "v1-only",
				Match: []*networking.HTTPMatchRequest{{Uri: &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: "/v1/(["}}}},
				Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "ratings.shop.example.com"}}},
			}},
		},
	}
}

// reviewsVS is the good VirtualService of shopConfig, as istiod records it.
const reviewsVS = "/apis/networking.istio.io/v1/namespaces/shop/virtual-service/reviews"

// maglevCluster is the cluster istiod builds for reviews under maglevRule.
const maglevCluster = "outbound|9080||reviews.shop.example.com"

// rejectMaglev is grpc-go's xDS client's rule (xdsresource
// unmarshal_cds.go): it knows no Maglev, and NACKs with these words.
func rejectMaglev(c *cluster.Cluster) error {
	if c.GetLbPolicy() == cluster.Cluster_MAGLEV {
		return fmt.Errorf("resource %q: unexpected lbPolicy %v in response", c.GetName(), c.GetLbPolicy())
	}
	return nil
}

// rejectBadRegex is Envoy's and grpc-go's rule for route regexes: both
// compile RE2 when the route configuration arrives, and NACK what does
// not compile. It also notes, per route configuration, the Istio objects
// istiod stamped on its routes.
type rejectBadRegex struct {
	mu      sync.Mutex
	stamped map[string][]string // route configuration -> istio.config of each route
}

func (c *rejectBadRegex) check(rc *route.RouteConfiguration) error {
	var stamps []string
	var bad error
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if p := r.GetMetadata().GetFilterMetadata()["istio"].GetFields()["config"].GetStringValue(); p != "" {
				stamps = append(stamps, p)
			}
			if re := r.GetMatch().GetSafeRegex().GetRegex(); re != "" && bad == nil {
				if _, err := regexp.Compile(re); err != nil {
					bad = fmt.Errorf("resource %q: route %q contains an invalid regex %q: %v", rc.GetName(), r.GetName(), re, err)
				}
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stamped == nil {
		c.stamped = map[string][]string{}
	}
	c.stamped[rc.GetName()] = stamps
	return bad
}

func (c *rejectBadRegex) stamps(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.stamped[name]))
}

// nackAfterSync waits until the client behind tp has synced, so that what
// apply changes comes to a running mesh, and returns the first NACK of
// typeURL the tap sees after it.
func nackAfterSync(t *testing.T, tp *mesh.Tap, apply func(), typeURL string) track.PushEnded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := tp.WaitEvents(ctx, func(evs []track.Event) bool {
		for _, e := range evs {
			if _, ok := e.(track.FullSyncComplete); ok {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the client never synced: %v\n%s", err, tp.Log)
	}
	apply()
	var nack track.PushEnded
	if _, err := tp.WaitEvents(ctx, func(evs []track.Event) bool {
		for _, e := range evs {
			if e, ok := e.(track.PushEnded); ok && e.Result == track.ResultNACK && e.Push.TypeURL == typeURL {
				nack = e
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no %s NACK through the tap: %v\n%s", typeURL, err, tp.Log)
	}
	return nack
}

// TestNACKNamesTheIstioObject: istiod's engine builds a cluster from a
// DestinationRule and routes from a VirtualService, stamping each with its
// source; the mesh is running and synced when the object arrives, Istio's
// ADS client rejects the push it causes through adstap, and adstap names the
// object on the NACK's live log line, in /debug/streams and on the span.
func TestNACKNamesTheIstioObject(t *testing.T) {
	leak.Check(t)
	tests := []struct {
		name      string
		apply     func(*testing.T, *mesh.Engine)
		typeURL   string
		wantNames []string // the rejected resources the message names
		source    string   // the live log's words
		path      string   // as istiod recorded it
		kubectl   string
	}{{
		name:      "DestinationRule",
		apply:     func(t *testing.T, e *mesh.Engine) { e.Apply(t, maglevRule) },
		typeURL:   v3.ClusterType,
		wantNames: []string{maglevCluster},
		source:    "from DestinationRule shop/reviews-maglev",
		path:      "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews-maglev",
		kubectl:   "kubectl get destinationrule -n shop reviews-maglev",
	}, {
		name: "VirtualService",
		apply: func(t *testing.T, e *mesh.Engine) {
			if _, err := e.Store().Create(badRegexRoute()); err != nil {
				t.Fatal(err)
			}
		},
		typeURL:   v3.RouteType,
		wantNames: []string{"9080"},
		source:    "from VirtualService shop/ratings-v1",
		path:      "/apis/networking.istio.io/v1/namespaces/shop/virtual-service/ratings-v1",
		kubectl:   "kubectl get virtualservice -n shop ratings-v1",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			engine := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: shopConfig})
			tp := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr})
			routes := &rejectBadRegex{}
			mesh.DeltaChecked(t, tp.Addr, "productpage", "10.0.0.7", mesh.Checks{Cluster: rejectMaglev, Route: routes.check})

			nack := nackAfterSync(t, tp, func() { tt.apply(t, engine) }, tt.typeURL)
			if strings.Join(nack.ErrorNames, ",") != strings.Join(tt.wantNames, ",") {
				t.Errorf("the NACK names %v, want %v (message %q)", nack.ErrorNames, tt.wantNames, nack.Error)
			}
			rejected := origin.Of(nack.Rejected)
			if got := rejected.Summary(); got != tt.source {
				t.Errorf("Summary() = %q, want %q", got, tt.source)
			}
			objs := rejected.Objects()
			if len(objs) != 1 || objs[0].Path != tt.path || objs[0].Kubectl() != tt.kubectl {
				t.Errorf("objects = %+v, want %s alone", objs, tt.path)
			}
			if tt.typeURL == v3.RouteType {
				// istiod stamped each route with its own VirtualService: the
				// message's route name picked the bad one out of the two.
				want := slices.Sorted(slices.Values([]string{reviewsVS, tt.path}))
				if got := routes.stamps("9080"); !slices.Equal(got, want) {
					t.Errorf("the routes of 9080 record %v, want %v", got, want)
				}
			}

			// The live log's NACK line.
			lines := tp.LogLines(" NACK ")
			if len(lines) == 0 {
				t.Fatalf("no NACK line in the live log:\n%s", tp.Log)
			}
			for _, l := range lines {
				t.Logf("live log: %s", l.Msg)
			}
			if l := lines[0].Msg; !strings.HasSuffix(l, " — "+tt.source) {
				t.Errorf("the NACK line does not end with %q: %s", " — "+tt.source, l)
			}

			// /debug/streams.
			page, err := tp.Page("/debug/streams")
			if err != nil {
				t.Fatal(err)
			}
			var streams struct {
				Streams []struct {
					Types map[string]struct {
						State           string `json:"state"`
						LastErrorSource struct {
							Summary   string `json:"summary"`
							Resources []struct {
								Name        string `json:"name"`
								IstioConfig []struct {
									Path, Kubectl string
								} `json:"istio_config"`
							} `json:"resources"`
						} `json:"last_error_source"`
					} `json:"types"`
				} `json:"streams"`
			}
			if err := json.Unmarshal([]byte(page), &streams); err != nil {
				t.Fatalf("/debug/streams: %v", err)
			}
			if len(streams.Streams) != 1 {
				t.Fatalf("/debug/streams has %d streams, want 1:\n%s", len(streams.Streams), page)
			}
			ts := streams.Streams[0].Types[tt.typeURL]
			if ts.State != "NACKED" || ts.LastErrorSource.Summary != tt.source ||
				len(ts.LastErrorSource.Resources) != 1 || len(ts.LastErrorSource.Resources[0].IstioConfig) != 1 ||
				ts.LastErrorSource.Resources[0].IstioConfig[0].Kubectl != tt.kubectl {
				t.Errorf("/debug/streams for %s: %+v, want NACKED from %s", tt.typeURL, ts, tt.path)
			}

			// The NACK's span, once flushed.
			tp.Stop()
			found := false
			for _, s := range tp.Spans.All() {
				for _, a := range s.Attributes() {
					if a.Key == "xds.error.istio_config" && strings.Join(a.Value.AsStringSlice(), ",") == tt.path {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("no span has xds.error.istio_config = [%s]", tt.path)
			}
		})
	}
}
