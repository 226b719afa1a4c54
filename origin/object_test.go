package origin_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/origin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParsePath(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		path    string
		want    origin.Object
		ok      bool
		str     string
		kubectl string
	}{{
		path:    "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews",
		want:    origin.Object{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule", Namespace: "shop", Name: "reviews", Path: "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews"},
		ok:      true,
		str:     "DestinationRule shop/reviews",
		kubectl: "kubectl get destinationrule -n shop reviews",
	}, {
		path:    "/apis/networking.istio.io/v1/namespaces/shop/virtual-service/reviews",
		want:    origin.Object{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService", Namespace: "shop", Name: "reviews", Path: "/apis/networking.istio.io/v1/namespaces/shop/virtual-service/reviews"},
		ok:      true,
		str:     "VirtualService shop/reviews",
		kubectl: "kubectl get virtualservice -n shop reviews",
	}, {
		path:    "/apis/networking.istio.io/v1/namespaces/istio-system/gateway/ingress",
		want:    origin.Object{Group: "networking.istio.io", Version: "v1", Kind: "Gateway", Namespace: "istio-system", Name: "ingress", Path: "/apis/networking.istio.io/v1/namespaces/istio-system/gateway/ingress"},
		ok:      true,
		str:     "Gateway istio-system/ingress",
		kubectl: "kubectl get gateways.networking.istio.io -n istio-system ingress",
	},
		{path: ""},
		{path: "reviews.shop"},
		{path: "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/"},
		{path: "/apis/networking.istio.io/v1/shop/destination-rule/reviews/x"},
		{path: "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/reviews/extra"},
	}
	for _, tt := range tests {
		got, ok := origin.ParsePath(tt.path)
		if ok != tt.ok {
			t.Errorf("ParsePath(%q) ok = %v, want %v", tt.path, ok, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParsePath(%q) (-want +got):\n%s", tt.path, diff)
		}
		if s := got.String(); s != tt.str {
			t.Errorf("String() = %q, want %q", s, tt.str)
		}
		if k := got.Kubectl(); k != tt.kubectl {
			t.Errorf("Kubectl() = %q, want %q", k, tt.kubectl)
		}
	}
}
