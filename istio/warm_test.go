package istio

import (
	"testing"

	"istio.io/istio/operator/pkg/render"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/adsc"
	istioagent "istio.io/istio/pkg/istio-agent"
	"istio.io/istio/pkg/kube/inject"
	"istio.io/istio/pkg/test"

	"github.com/adstap/adstap/internal/pipeline"
)

var (
	_ = render.GenerateManifest
	_ = xds.NewFakeDiscoveryServer
	_ = adsc.New
	_ = istioagent.NewAgent
	_ = inject.IntoObject
	_ = test.Wrap
	_ = pipeline.New
)

func TestWarm(t *testing.T) {}
