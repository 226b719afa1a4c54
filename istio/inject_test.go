package istio

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/config/mesh"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/istio/internal/injection"
)

// The adstap injection template (deploy/istio) through Istio's real sidecar
// injector, on installs rendered from the pinned Istio's charts, with
// istio-proxy injected as a native sidecar and as a regular container.

// adstapOperator is the IstioOperator form of the template; the helm values
// form carries the same text (deploy/istio_files_test.go).
var adstapOperator = filepath.Join("..", "deploy", "istio", "adstap-istiooperator.yaml")

// optIn is the one annotation a workload adds.
const optIn = "inject.istio.io/templates"

// install is one way istiod can be installed.
type install struct {
	name string
	set  []string
	// istiod is the address the proxies' CA client and adstap's upstream
	// must use on this install.
	istiod string
	cni    bool
}

var installs = []install{
	{"default", nil, "istiod.istio-system.svc:15012", false},
	{"revision canary", []string{"revision=canary"}, "istiod-canary.istio-system.svc:15012", false},
	{"namespace istio-control", []string{"namespace=istio-control", "values.global.istioNamespace=istio-control"}, "istiod.istio-control.svc:15012", false},
	{"istio-cni", []string{"components.cni.enabled=true", "values.pilot.cni.enabled=true"}, "istiod.istio-system.svc:15012", true},
}

// sidecarModes are the sidecar.istio.io/nativeSidecar annotation's values.
var sidecarModes = []bool{false, true}

// eachInstallAndMode runs test for every install in both sidecar modes.
func eachInstallAndMode(t *testing.T, test func(t *testing.T, in install, native bool)) {
	t.Helper()
	for _, in := range installs {
		for _, native := range sidecarModes {
			t.Run(in.name+"/"+modeName(native), func(t *testing.T) { test(t, in, native) })
		}
	}
}

func modeName(native bool) string {
	if native {
		return "native sidecars"
	}
	return "istio-proxy as a container"
}

var (
	renderMu sync.Mutex
	rendered = map[string]*injection.Injector{}
)

// injector renders an install once per test binary: it takes a second or two.
func injector(t *testing.T, in install, withTemplate bool) *injection.Injector {
	t.Helper()
	key := fmt.Sprint(in.set, withTemplate)
	renderMu.Lock()
	defer renderMu.Unlock()
	if inj, ok := rendered[key]; ok {
		return inj
	}
	var files []string
	if withTemplate {
		files = []string{adstapOperator}
	}
	inj, err := injection.Render(injection.Install{Files: files, Set: in.set})
	if err != nil {
		t.Fatal(err)
	}
	rendered[key] = inj
	return inj
}

// workload is a Deployment as a user writes it, with its own annotations.
func workload(annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": "productpage"}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "productpage", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "productpage",
					Image: "docker.io/istio/examples-bookinfo-productpage-v1:1.20.2",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(9080)},
					}},
				}}},
			},
		},
	}
}

// injectAdstap injects a workload that opted in, in one sidecar mode, with
// the user's own annotations.
func injectAdstap(t *testing.T, in install, native bool, own map[string]string) *corev1.PodTemplateSpec {
	t.Helper()
	a := map[string]string{optIn: "sidecar,adstap", "sidecar.istio.io/nativeSidecar": strconv.FormatBool(native)}
	for k, v := range own {
		a[k] = v
	}
	pod, err := injector(t, in, true).Inject(workload(a))
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func container(t *testing.T, pod *corev1.PodTemplateSpec, name string) *corev1.Container {
	t.Helper()
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	t.Fatalf("the injected pod has no container %s", name)
	return nil
}

func env(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// flagValue is --name=value among a container's args.
func flagValue(c *corev1.Container, name string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// iptablesArg is the value after flag (-o, -d, ...) in istio-iptables' args.
func iptablesArg(c *corev1.Container, flag string) (string, bool) {
	for i, a := range c.Args {
		if a == flag && i+1 < len(c.Args) {
			return c.Args[i+1], true
		}
	}
	return "", false
}

func ports(list string) []string {
	var out []string
	for p := range strings.SplitSeq(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// agentProxyConfig is the ProxyConfig istio-agent runs with: PROXY_CONFIG,
// then the pod's proxy.istio.io/config annotation, which it reads from the
// downward API (getMeshConfig in pilot/cmd/pilot-agent/config/config.go).
func agentProxyConfig(t *testing.T, pod *corev1.PodTemplateSpec) *meshconfig.ProxyConfig {
	t.Helper()
	proxy := container(t, pod, "istio-proxy")
	pc, ok := env(proxy, "PROXY_CONFIG")
	if !ok {
		t.Fatal("istio-proxy has no PROXY_CONFIG")
	}
	mc, err := mesh.ApplyProxyConfig(pc, mesh.DefaultMeshConfig())
	if err != nil {
		t.Fatalf("PROXY_CONFIG %q: %v", pc, err)
	}
	if a, ok := pod.Annotations["proxy.istio.io/config"]; ok {
		if mc, err = mesh.ApplyProxyConfig(a, mc); err != nil {
			t.Fatalf("proxy.istio.io/config %q: %v", a, err)
		}
	}
	return mc.DefaultConfig
}

// TestAdstapTemplateXDSPath: istio-agent dials adstap, adstap dials the
// install's istiod, certificates still come from istiod, and adstap's dial
// is not redirected to Envoy.
func TestAdstapTemplateXDSPath(t *testing.T) {
	leakcheck.Check(t)
	eachInstallAndMode(t, func(t *testing.T, in install, native bool) {
		pod := injectAdstap(t, in, native, nil)
		tap, proxy := container(t, pod, "adstap"), container(t, pod, "istio-proxy")
		pc := agentProxyConfig(t, pod)
		if listen := flagValue(tap, "listen"); pc.DiscoveryAddress != listen {
			t.Errorf("istio-agent's discoveryAddress = %q, want adstap's --listen %q", pc.DiscoveryAddress, listen)
		}
		if pc.ControlPlaneAuthPolicy != meshconfig.AuthenticationPolicy_NONE {
			t.Errorf("controlPlaneAuthPolicy = %v, want NONE: adstap's listener is plaintext on loopback", pc.ControlPlaneAuthPolicy)
		}
		if ca, _ := env(proxy, "CA_ADDR"); ca != in.istiod {
			t.Errorf("CA_ADDR = %q, want istiod %q: certificates do not go through adstap", ca, in.istiod)
		}
		up := flagValue(tap, "upstream")
		if up != in.istiod {
			t.Errorf("adstap --upstream = %q, want %q", up, in.istiod)
		}
		host, port, _ := strings.Cut(up, ":")
		if sn := flagValue(tap, "upstream-server-name"); sn != host {
			t.Errorf("adstap --upstream-server-name = %q, want %q", sn, host)
		}
		if !slices.Contains(ports(pod.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"]), port) {
			t.Errorf("traffic.sidecar.istio.io/excludeOutboundPorts = %q lacks %s (istio-cni reads it)", pod.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"], port)
		}
		if !in.cni {
			o, _ := iptablesArg(container(t, pod, "istio-init"), "-o")
			if !slices.Contains(ports(o), port) {
				t.Errorf("istio-init -o %q lacks %s: adstap's dial to istiod would go to Envoy", o, port)
			}
		}
		ns := strings.TrimSuffix(strings.SplitN(host, ".", 2)[1], ".svc")
		if otlp, _ := env(tap, "OTEL_EXPORTER_OTLP_ENDPOINT"); !strings.Contains(otlp, "."+ns+".svc:") {
			t.Errorf("adstap's OTEL_EXPORTER_OTLP_ENDPOINT = %q, want the collector in istiod's namespace %s", otlp, ns)
		}
		t.Logf("agent -> %s (plaintext) -> adstap -> %s (TLS, server name %s); CA_ADDR %s; excludeOutboundPorts %s",
			pc.DiscoveryAddress, up, flagValue(tap, "upstream-server-name"), in.istiod, pod.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"])
	})
}
