package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"istio.io/istio/pilot/pkg/config/kube/crd"
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
