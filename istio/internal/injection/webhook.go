package injection

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/config/mesh/meshwatcher"
	"istio.io/istio/pkg/kube/inject"
	"istio.io/istio/pkg/kube/multicluster"
)

// fixedConfig is the injector's configuration as istiod reads it from the
// istio-sidecar-injector ConfigMap (its config and values keys), fixed for
// the life of a test.
type fixedConfig struct {
	cfg    *inject.Config
	values string
}

func (f fixedConfig) SetHandler(func(*inject.Config, string) error) {}
func (f fixedConfig) Run(<-chan struct{})                           {}
func (f fixedConfig) Get() (*inject.Config, string, error)          { return f.cfg, f.values, nil }

// Webhook is istiod's sidecar injection webhook (inject.NewWebhook) serving
// this install's configuration, with no ProxyConfig resources.
func (i *Injector) Webhook() (http.Handler, error) {
	store := model.NewFakeStore()
	env := &model.Environment{Watcher: meshwatcher.NewTestWatcher(i.Mesh), ConfigStore: store}
	env.SetPushContext(&model.PushContext{ProxyConfigs: model.GetProxyConfigs(store, i.Mesh)})
	mux := http.NewServeMux()
	if _, err := inject.NewWebhook(inject.WebhookParameters{
		Watcher:      fixedConfig{i.Config, i.RawValues},
		Env:          env,
		Mux:          mux,
		Revision:     i.Revision,
		MultiCluster: multicluster.NewFakeController(),
	}); err != nil {
		return nil, err
	}
	return mux, nil
}

// Admit sends pod to the webhook as the API server does when a pod is
// created (an AdmissionReview on /inject) and applies the JSON patch it
// answers with.
func Admit(webhook http.Handler, pod *corev1.Pod) (*corev1.Pod, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("adstap-test"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	req := httptest.NewRequest(http.MethodPost, "/inject", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	webhook.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("webhook: %d %s", rec.Code, rec.Body.Bytes())
	}
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil {
		return nil, fmt.Errorf("webhook answer: %w", err)
	}
	r := answer.Response
	switch {
	case r == nil:
		return nil, fmt.Errorf("webhook answered no response: %s", rec.Body.Bytes())
	case !r.Allowed:
		msg := ""
		if r.Result != nil {
			msg = r.Result.Message
		}
		return nil, fmt.Errorf("webhook refused the pod: %s", msg)
	case len(r.Patch) == 0:
		return nil, fmt.Errorf("webhook did not inject the pod")
	}
	patch, err := jsonpatch.DecodePatch(r.Patch)
	if err != nil {
		return nil, fmt.Errorf("webhook patch: %w", err)
	}
	patched, err := patch.Apply(raw)
	if err != nil {
		return nil, fmt.Errorf("applying the webhook's patch: %w", err)
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(patched, out); err != nil {
		return nil, err
	}
	return out, nil
}
