// Package injection runs Istio's sidecar injector on a default install
// rendered from the pinned Istio's own charts, as Istio's injector tests do.
package injection

import (
	"fmt"
	"maps"
	"strings"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	Config    *inject.Config
	Values    inject.ValuesConfig
	RawValues string
	Mesh      *meshconfig.MeshConfig
	Revision  string
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
				inj.Config, inj.Values, inj.RawValues = &cfg, vc, vals
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

// Inject injects a Deployment's pod both ways istiod's injector runs: as
// the webhook admits a pod the Deployment's ReplicaSet creates (an
// AdmissionReview to inject.NewWebhook's /inject, its JSON patch applied),
// and as istioctl kube-inject does (inject.IntoObject). It returns the
// webhook's pod, and an error if the two differ.
func (i *Injector) Inject(d *appsv1.Deployment) (*corev1.PodTemplateSpec, error) {
	webhook, err := i.Webhook()
	if err != nil {
		return nil, err
	}
	pod, werr := Admit(webhook, podOf(d))
	var warnings []string
	out, kerr := inject.IntoObject(nil, i.Config.Templates, i.Values, i.Revision, i.Mesh, d, func(w string) { warnings = append(warnings, w) })
	if kerr == nil && len(warnings) > 0 {
		kerr = fmt.Errorf("not injected: %s", strings.Join(warnings, "; "))
	}
	switch {
	case werr != nil && kerr != nil:
		return nil, werr
	case werr != nil || kerr != nil:
		return nil, fmt.Errorf("the webhook and kube-inject disagree: webhook: %v; kube-inject: %v", werr, kerr)
	}
	injected, ok := out.(*appsv1.Deployment)
	if !ok {
		return nil, fmt.Errorf("kube-inject returned a %T", out)
	}
	if diff := cmp.Diff(injected.Spec.Template.Spec, pod.Spec); diff != "" {
		return nil, fmt.Errorf("the webhook and kube-inject inject different pods (-kube-inject +webhook):\n%s", diff)
	}
	for k, v := range injected.Spec.Template.Annotations {
		if pod.Annotations[k] != v {
			return nil, fmt.Errorf("annotation %s: kube-inject %q, webhook %q", k, v, pod.Annotations[k])
		}
	}
	return &corev1.PodTemplateSpec{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec}, nil
}

// podOf is the pod a Deployment's ReplicaSet asks the API server to create.
func podOf(d *appsv1.Deployment) *corev1.Pod {
	rs := d.Name + "-7d4b9c5f6"
	meta := *d.Spec.Template.ObjectMeta.DeepCopy()
	meta.Namespace, meta.GenerateName = d.Namespace, rs+"-"
	meta.Labels = maps.Clone(meta.Labels)
	meta.Labels["pod-template-hash"] = "7d4b9c5f6"
	meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, Controller: ptr(true)}}
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: meta, Spec: *d.Spec.Template.Spec.DeepCopy()}
}

func ptr[T any](v T) *T { return &v }
