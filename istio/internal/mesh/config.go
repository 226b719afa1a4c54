package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"istio.io/istio/pilot/pkg/config/kube/crd"
	"istio.io/istio/pilot/pkg/model"
	"istio.io/istio/pkg/config/schema/kind"
	"istio.io/istio/pkg/util/sets"
)

// Apply creates or replaces Istio configuration (YAML, one or more
// documents) in the engine's store, as kubectl apply would: istiod sees a
// config change and pushes.
func (e *Engine) Apply(t *testing.T, yaml string) {
	t.Helper()
	configs, _, err := crd.ParseInputs(yaml)
	if err != nil {
		t.Fatalf("engine: parsing configuration: %v\n%s", err, yaml)
	}
	store := e.Store()
	for _, c := range configs {
		if c.Namespace == "" {
			c.Namespace = Namespace
		}
		if store.Get(c.GroupVersionKind, c.Name, c.Namespace) != nil {
			_, err = store.Update(c)
		} else {
			_, err = store.Create(c)
		}
		if err != nil {
			t.Fatalf("engine: applying %s %s/%s: %v", c.GroupVersionKind.Kind, c.Namespace, c.Name, err)
		}
	}
}

// ServiceEntry is a mesh-external service at host, port 80, with static
// endpoints: a config change for istiod.
func ServiceEntry(name, host string, ips ...string) string {
	var eps strings.Builder
	for _, ip := range ips {
		fmt.Fprintf(&eps, "  - address: %s\n", ip)
	}
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata:
  name: %s
  namespace: default
spec:
  hosts: [%s]
  ports:
  - number: 80
    name: http
    protocol: HTTP
  resolution: STATIC
  location: MESH_EXTERNAL
  endpoints:
%s`, name, host, eps.String())
}

// Service is a Kubernetes Service at clusterIP with port 9080 (http) and
// an EndpointSlice holding ips, as KubernetesObjectString takes them.
func Service(name, clusterIP string, ips ...string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %[1]s
  namespace: default
spec:
  clusterIP: %[2]s
  ports:
  - name: http
    port: 9080
    protocol: TCP
---
%[3]s`, name, clusterIP, endpointSliceYAML(name, ips))
}

func endpointSliceYAML(service string, ips []string) string {
	var eps strings.Builder
	for _, ip := range ips {
		fmt.Fprintf(&eps, "- addresses: [%s]\n  conditions: {ready: true}\n", ip)
	}
	return fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-slice
  namespace: default
  labels:
    kubernetes.io/service-name: %[1]s
addressType: IPv4
ports:
- name: http
  port: 9080
  protocol: TCP
endpoints:
%[2]s`, service, eps.String())
}

// SetEndpoints replaces the addresses of a Service's EndpointSlice (made
// by Service): an endpoint-only change for istiod.
func (e *Engine) SetEndpoints(t *testing.T, service string, ips ...string) {
	t.Helper()
	slices := e.KubeClient().Kube().DiscoveryV1().EndpointSlices(Namespace)
	ctx := context.Background()
	s, err := slices.Get(ctx, service+"-slice", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("engine: EndpointSlice of %s: %v", service, err)
	}
	s = s.DeepCopy()
	s.Endpoints = nil
	ready := true
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("engine: updating the EndpointSlice of %s: %v", service, err)
	}
}

// PushEndpointsAsReleased changes the endpoints of a Kubernetes Service and
// pushes the change as released istiod versions do, with istiod's own
// code: the endpoint cache is updated without a push (EDSCacheUpdate), the
// change's cached EDS dropped, and an incremental push started on the
// current push context (AdsPushAll), so it goes out under the version of
// the last full push. (Released istiod's DiscoveryServer.Push does exactly
// this when the request is not full: req.Push = s.globalPushContext(); the
// pinned development engine makes a new push context, and version, for
// every push.)
func (e *Engine) PushEndpointsAsReleased(t *testing.T, service string, ips ...string) {
	t.Helper()
	host := service + "." + Namespace + ".svc.cluster.local"
	shards, ok := e.Discovery.Env.EndpointIndex.ShardsForService(host, Namespace)
	if !ok {
		t.Fatalf("engine: no endpoints of %s", host)
	}
	shards.RLock()
	var key model.ShardKey
	var template *model.IstioEndpoint
	for k, eps := range shards.Shards {
		if len(eps) > 0 {
			key, template = k, eps[0]
		}
	}
	shards.RUnlock()
	if template == nil {
		t.Fatalf("engine: %s has no endpoint to copy", host)
	}
	var eps []*model.IstioEndpoint
	for _, ip := range ips {
		ep := template.DeepCopy()
		ep.Addresses = []string{ip}
		eps = append(eps, ep)
	}
	e.Discovery.EDSCacheUpdate(key, host, Namespace, eps)
	start := time.Now()
	// istiod pushes after its debounce, as its own timer would.
	time.AfterFunc(e.debounce, func() {
		updated := sets.New(model.ConfigKey{Kind: kind.ServiceEntry, Name: host, Namespace: Namespace})
		e.Discovery.Cache.Clear(updated)
		e.Discovery.AdsPushAll(&model.PushRequest{
			ConfigsUpdated: sets.New(model.ConfigKey{Kind: kind.Endpoints, Name: host, Namespace: Namespace}),
			Push:           e.Discovery.Env.PushContext(),
			Start:          start,
			Reason:         model.NewReasonStats(model.EndpointUpdate),
		})
	})
}
