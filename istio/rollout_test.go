package istio_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"istio.io/istio/tests/util/leak"

	"github.com/adstap/adstap/internal/rollout"
	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/istio/internal/mesh"
)

// reviewsRule is a DestinationRule every proxy accepts, with the connect
// timeout it sets: each edit changes the reviews cluster.
func reviewsRule(timeout string) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: shop
spec:
  host: reviews.shop.example.com
  trafficPolicy:
    connectionPool:
      tcp:
        connectTimeout: %s
`, timeout)
}

// TestRolloutOfADestinationRule: istiod's engine, three sidecars each
// behind its own adstap sending spans to a real Jaeger. The DestinationRule
// shop/reviews is created, then edited; istiod stamps the cluster it
// shapes, each push span names the rule, and rollout --object finds the two
// rounds it caused, each converged to the ACK of every proxy, while the
// round of another object is left out.
func TestRolloutOfADestinationRule(t *testing.T) {
	leak.Check(t)
	j := jaegertest.Start(t)
	service := fmt.Sprintf("adstap-istio-rollout-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)
	engine := mesh.StartEngine(t, mesh.EngineOptions{ConfigString: shopConfig})
	workloads := []string{"productpage", "details", "ratings"}
	for i, w := range workloads {
		// Each tap is a sidecar's: the injection template names its pod.
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name="+w+",k8s.namespace.name="+mesh.Namespace)
		tp := mesh.StartTap(t, mesh.TapOptions{Upstream: engine.Addr, OTLPEndpoint: "http://" + j.OTLPGRPC})
		mesh.SotW(t, tp.Addr, w, fmt.Sprintf("10.0.0.%d", i+1))
	}
	jq, err := rollout.Dial(j.QueryGRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer jq.Close()
	read := func(object string) rollout.Report {
		rep, _ := rollout.Read(context.Background(), jq, rollout.Query{Service: service, Object: object, Since: time.Hour})
		return rep
	}
	// converged waits until rollout shows n rounds of object, each ACKed
	// by the three proxies.
	converged := func(object string, n int) rollout.Report {
		var rep rollout.Report
		xdstest.EventuallyWithin(t, 60*time.Second, fmt.Sprintf("%d rounds of %s, each ACKed by 3 proxies", n, object), func() bool {
			rep = read(object)
			if len(rep.Rounds) != n {
				return false
			}
			for _, r := range rep.Rounds {
				if r.Counts[rollout.StateACKed] != 3 {
					return false
				}
			}
			return true
		})
		return rep
	}

	engine.Apply(t, reviewsRule("3s"))
	converged("destination-rule/shop/reviews", 1)
	engine.Apply(t, reviewsRule("5s"))
	rep := converged("destination-rule/shop/reviews", 2)
	if !rep.Converged {
		t.Errorf("report not converged: %+v", rep)
	}
	for _, r := range rep.Rounds {
		t.Logf("round %s (full push %v, %v): %d proxies %v, time to ACK %+v, changed %v", r.PushID, r.FullPush, r.Types, r.Reached, r.Counts, r.TimeToACK, r.Objects)
		var names []string
		for _, p := range r.Proxies {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		if want := []string{"details.default", "productpage.default", "ratings.default"}; !slices.Equal(names, want) {
			t.Errorf("round %s: proxies %v, want %v (pod.namespace from each tap's resource)", r.PushID, names, want)
		}
		if !slices.Contains(r.Objects, "destination-rule/shop/reviews") {
			t.Errorf("round %s: changed %v, want the DestinationRule among them", r.PushID, r.Objects)
		}
		if r.TimeToACK == nil || r.TimeToACK.Max <= 0 {
			t.Errorf("round %s: time to ACK %+v", r.PushID, r.TimeToACK)
		}
	}
	if rep.Rounds[0].Version == rep.Rounds[1].Version {
		t.Errorf("the two edits' rounds share version %s", rep.Rounds[0].Version)
	}
	// A VirtualService no edit touched changed in no round.
	if _, err := rollout.Read(context.Background(), jq, rollout.Query{Service: service, Object: "virtual-service/shop/nothing", Since: time.Hour}); err == nil {
		t.Error("rollout found rounds of an object nothing changed")
	}
}
