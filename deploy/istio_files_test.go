package deploy_test

import (
	"flag"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite deploy/istio's helm values and IstioOperator files from sidecar.yaml")

// istioTemplateFiles are the two forms users install the adstap injection
// template in, each wrapping deploy/sidecar.yaml: helm values
// for the istiod chart, and an IstioOperator for istioctl.
var istioTemplateFiles = map[string]struct {
	head   string
	indent int
}{
	"adstap-values.yaml": {`# Helm values for Istio's istiod chart (istio/istiod): adds the "adstap"
# sidecar injection template. A pod opts in with the annotation
#   inject.istio.io/templates: sidecar,adstap
# Install or upgrade istiod with it, next to your own values:
#   helm upgrade istiod istio/istiod -n istio-system --reuse-values -f deploy/istio/adstap-values.yaml
# Generated from sidecar.yaml (go test ./deploy -run TestIstioTemplateFiles -update); docs/deploy.md.
sidecarInjectorWebhook:
  templates:
    adstap: |
`, 6},
	"adstap-istiooperator.yaml": {`# An IstioOperator overlay for istioctl: adds the "adstap" sidecar
# injection template. A pod opts in with the annotation
#   inject.istio.io/templates: sidecar,adstap
# Install with it, next to your own overlays (add --revision for a revisioned istiod):
#   istioctl install -f your-istiooperator.yaml -f deploy/istio/adstap-istiooperator.yaml
# Generated from sidecar.yaml (go test ./deploy -run TestIstioTemplateFiles -update); docs/deploy.md.
apiVersion: install.istio.io/v1alpha1
kind: IstioOperator
spec:
  values:
    sidecarInjectorWebhook:
      templates:
        adstap: |
`, 10},
}

// TestIstioTemplateFiles: the helm values and the IstioOperator carry the
// template as it is in sidecar.yaml, which the Istio compatibility
// suite (istio/inject_test.go) runs through Istio's injector.
func TestIstioTemplateFiles(t *testing.T) {
	leakcheck.Check(t)
	tmpl, err := os.ReadFile("sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range istioTemplateFiles {
		var b strings.Builder
		b.WriteString(f.head)
		for line := range strings.SplitSeq(strings.TrimRight(string(tmpl), "\n"), "\n") {
			if line != "" {
				b.WriteString(strings.Repeat(" ", f.indent) + line)
			}
			b.WriteString("\n")
		}
		path := filepath.Join("istio", name)
		if *update {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != b.String() {
			t.Errorf("%s does not carry sidecar.yaml as it is: run go test ./deploy -run TestIstioTemplateFiles -update", path)
		}
	}
}
