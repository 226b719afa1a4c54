// Package injection runs Istio's sidecar injector on a default install
// rendered from the pinned Istio's own charts, as Istio's injector tests do.
package injection

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/operator/pkg/render"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/config/schema/gvk"
	"istio.io/istio/pkg/kube/inject"
)

// Install is what the default install is rendered with.
type Install struct {
	// Files are IstioOperator overlays (istioctl install -f), such as
	// deploy/istio/adstap-istiooperator.yaml.
	Files []string
	// Set are istioctl's --set flags, such as "revision=canary" or
	// "values.pilot.cni.enabled=true".
	Set []string
}

// Injector is the injection configuration istiod would load from the
// rendered install: the istio-sidecar-injector ConfigMap (templates and
// values) and the mesh config of the istio ConfigMap.
type Injector struct {
	Config   *inject.Config
	Values   inject.ValuesConfig
	Mesh     *meshconfig.MeshConfig
	Revision string
}

// Render renders the install the way pkg/kube/inject's getInjectionSettings
// does (profile empty, pilot on) from the charts compiled into the pinned
// module (istio.io/istio/manifests), and reads the injector's ConfigMaps.
func Render(in Install) (*Injector, error) {
	set := append([]string{"profile=empty", "components.pilot.enabled=true"}, in.Set...)
	manifests, _, err := render.GenerateManifest(in.Files, set, false, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("rendering the install: %w", err)
	}
	inj := &Injector{}
	for _, s := range set {
		if rev, ok := strings.CutPrefix(s, "revision="); ok {
			inj.Revision = rev
		}
	}
	for _, set := range manifests {
		for _, o := range set.Manifests {
			if o.GetKind() != gvk.ConfigMap.Kind {
				continue
			}
			data, _ := o.Object["data"].(map[string]any)
			switch name := o.GetName(); {
			case strings.HasPrefix(name, "istio-sidecar-injector"):
				raw, _ := data["config"].(string)
				vals, _ := data["values"].(string)
				vc, err := inject.NewValuesConfig(vals)
				if err != nil {
					return nil, fmt.Errorf("%s: values: %w", name, err)
				}
				cfg, err := inject.UnmarshalConfig([]byte(raw))
				if err != nil {
					return nil, fmt.Errorf("%s: config: %w", name, err)
				}
				inj.Config, inj.Values = &cfg, vc
			case name == "istio" || strings.HasPrefix(name, "istio-"):
				m, ok := data["mesh"].(string)
				if !ok {
					continue
				}
				mc, err := mesh.ApplyMeshConfig(m, mesh.DefaultMeshConfig())
				if err != nil {
					return nil, fmt.Errorf("%s: mesh config: %w", name, err)
				}
				inj.Mesh = mc
			}
		}
	}
	if inj.Config == nil || inj.Mesh == nil {
		return nil, fmt.Errorf("the rendered install has no istio-sidecar-injector or istio ConfigMap")
	}
	return inj, nil
}

// Inject runs the injector on a Deployment, as `istioctl kube-inject` and the
// webhook do (inject.IntoObject), and returns the injected pod template.
func (i *Injector) Inject(d *appsv1.Deployment) (*corev1.PodTemplateSpec, error) {
	var warnings []string
	out, err := inject.IntoObject(nil, i.Config.Templates, i.Values, i.Revision, i.Mesh, d, func(w string) { warnings = append(warnings, w) })
	if err != nil {
		return nil, err
	}
	injected, ok := out.(*appsv1.Deployment)
	if !ok {
		return nil, fmt.Errorf("the injector returned a %T", out)
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("not injected: %s", strings.Join(warnings, "; "))
	}
	return &injected.Spec.Template, nil
}
