package istio

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestAdstapTemplateKeepsThePodsOwnSettings: what the workload already says
// survives the template: its port exclusions (merged with adstap's), its
// proxy.istio.io/config (with adstap's discoveryAddress merged in), and its
// own metrics, merged by istio-agent with adstap's.
func TestAdstapTemplateKeepsThePodsOwnSettings(t *testing.T) {
	leakcheck.Check(t)
	own := map[string]string{
		"traffic.sidecar.istio.io/excludeOutboundPorts": "5432,6379",
		"traffic.sidecar.istio.io/excludeInboundPorts":  "8081",
		"proxy.istio.io/config":                         "concurrency: 3\ndrainDuration: 13s\n",
		"prometheus.io/scrape":                          "true",
		"prometheus.io/port":                            "9080",
		"prometheus.io/path":                            "/stats",
	}
	eachInstallAndMode(t, func(t *testing.T, in install, native bool) {
		pod := injectAdstap(t, in, native, own)
		_, upstreamPort, _ := strings.Cut(in.istiod, ":")
		out := ports(pod.Annotations["traffic.sidecar.istio.io/excludeOutboundPorts"])
		if want := []string{"5432", "6379", upstreamPort}; !slices.Equal(out, want) {
			t.Errorf("excludeOutboundPorts annotation = %v, want %v", out, want)
		}
		if !in.cni {
			o, _ := iptablesArg(container(t, pod, "istio-init"), "-o")
			if want := []string{"5432", "6379", upstreamPort}; !slices.Equal(ports(o), want) {
				t.Errorf("istio-init -o %q, want %v", o, want)
			}
			d, _ := iptablesArg(container(t, pod, "istio-init"), "-d")
			if !slices.Contains(ports(d), "8081") {
				t.Errorf("istio-init -d %q lost the pod's 8081", d)
			}
		} else if in := ports(pod.Annotations["traffic.sidecar.istio.io/excludeInboundPorts"]); !slices.Contains(in, "8081") {
			t.Errorf("excludeInboundPorts annotation = %v lost the pod's 8081", in)
		}
		pc := agentProxyConfig(t, pod)
		if pc.GetConcurrency().GetValue() != 3 || pc.GetDrainDuration().AsDuration().String() != "13s" {
			t.Errorf("istio-agent's ProxyConfig lost the pod's concurrency: 3 and drainDuration: 13s: %v", pc)
		}
		if pc.DiscoveryAddress != "127.0.0.1:15100" {
			t.Errorf("istio-agent's discoveryAddress = %q, want the tap", pc.DiscoveryAddress)
		}
		scrape, _ := env(container(t, pod, "istio-proxy"), "ISTIO_PROMETHEUS_ANNOTATIONS")
		if !strings.Contains(scrape, `"port":"9080","path":"/stats"`) || !strings.Contains(scrape, `"port":"15102","path":"/metrics"`) {
			t.Errorf("ISTIO_PROMETHEUS_ANNOTATIONS = %s, want the app's 9080:/stats and adstap's 15102:/metrics (--metrics-listen)", scrape)
		}
		if pod.Annotations["prometheus.io/port"] != "15020" {
			t.Errorf("prometheus.io/port = %q, want istio-agent's merged 15020", pod.Annotations["prometheus.io/port"])
		}
	})
}

// TestAdstapTemplateChangesOnlyWhatItMust compares the pod injected with
// "sidecar,adstap" to the one Istio injects alone: istio-init's arguments
// are the same but for -o (the template renders them again, to merge it),
// istio-proxy is the same but for PROXY_CONFIG and, as a native sidecar, its
// startup probe; the app's containers are untouched.
func TestAdstapTemplateChangesOnlyWhatItMust(t *testing.T) {
	leakcheck.Check(t)
	own := map[string]string{
		"traffic.sidecar.istio.io/excludeOutboundPorts": "5432",
		"traffic.sidecar.istio.io/includeInboundPorts":  "9080",
		"traffic.sidecar.istio.io/excludeInterfaces":    "eth1",
		"sidecar.istio.io/agentLogLevel":                "debug",
		"proxy.istio.io/config":                         "concurrency: 3\nproxyMetadata:\n  ISTIO_META_DNS_CAPTURE: \"true\"\n",
	}
	eachInstallAndMode(t, func(t *testing.T, in install, native bool) {
		plainAnn := map[string]string{"sidecar.istio.io/nativeSidecar": map[bool]string{true: "true", false: "false"}[native]}
		for k, v := range own {
			plainAnn[k] = v
		}
		plain, err := injector(t, in, false).Inject(workload(plainAnn))
		if err != nil {
			t.Fatal(err)
		}
		tapped := injectAdstap(t, in, native, own)
		if !in.cni {
			a, b := container(t, plain, "istio-init").DeepCopy(), container(t, tapped, "istio-init").DeepCopy()
			for _, c := range []*corev1.Container{a, b} {
				for i := range c.Args {
					if c.Args[i] == "-o" {
						c.Args[i+1] = "(merged)"
					}
				}
			}
			if !equality.Semantic.DeepEqual(a, b) {
				t.Errorf("istio-init differs beyond -o:\nIstio alone: %q\nwith adstap: %q", a.Args, b.Args)
			}
		}
		// PROXY_CONFIG: the same ProxyConfig but for where and how the
		// agent dials.
		pcPlain, pcTapped := agentProxyConfig(t, plain), agentProxyConfig(t, tapped)
		pcTapped.DiscoveryAddress, pcTapped.ControlPlaneAuthPolicy = pcPlain.DiscoveryAddress, pcPlain.ControlPlaneAuthPolicy
		if !proto.Equal(pcPlain, pcTapped) {
			t.Errorf("istio-agent's ProxyConfig differs beyond discoveryAddress and controlPlaneAuthPolicy:\nIstio alone: %v\nwith adstap: %v", pcPlain, pcTapped)
		}
		a, b := container(t, plain, "istio-proxy").DeepCopy(), container(t, tapped, "istio-proxy").DeepCopy()
		for _, c := range []*corev1.Container{a, b} {
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "PROXY_CONFIG" || e.Name == "ISTIO_PROMETHEUS_ANNOTATIONS"
			})
			if native {
				c.StartupProbe = nil
			}
		}
		if !equality.Semantic.DeepEqual(a, b) {
			t.Errorf("istio-proxy differs beyond PROXY_CONFIG, the metrics to merge and the startup probe:\nIstio alone: %+v\nwith adstap: %+v", a, b)
		}
		app := container(t, tapped, "productpage")
		if !equality.Semantic.DeepEqual(container(t, plain, "productpage"), app) {
			t.Errorf("the app's container was changed")
		}
	})
}

// TestAdstapTemplateRefusesToDialItself: a pod whose proxy.istio.io/config
// already points the agent at the tap (what the retired patch left) would
// have adstap dial itself; the injector refuses it, saying why.
func TestAdstapTemplateRefusesToDialItself(t *testing.T) {
	leakcheck.Check(t)
	patched := workload(map[string]string{
		optIn:                   "sidecar,adstap",
		"proxy.istio.io/config": "discoveryAddress: 127.0.0.1:15100\ncontrolPlaneAuthPolicy: NONE\n",
	})
	_, err := injector(t, installs[0], true).Inject(patched)
	if err == nil || !strings.Contains(err.Error(), "would dial itself") {
		t.Fatalf("injecting a pod already pointed at the tap: %v, want the template's refusal", err)
	}
	t.Log(err)
}

// TestAdstapTemplateComesAfterSidecar: the template changes what Istio's
// "sidecar" template injected, so alone or before it, it is refused with
// the annotation to write instead.
func TestAdstapTemplateComesAfterSidecar(t *testing.T) {
	leakcheck.Check(t)
	for _, templates := range []string{"adstap", "adstap,sidecar"} {
		_, err := injector(t, installs[0], true).Inject(workload(map[string]string{optIn: templates}))
		if err == nil || !strings.Contains(err.Error(), "inject.istio.io/templates: sidecar,adstap") {
			t.Errorf("inject.istio.io/templates: %s: %v, want the template's refusal", templates, err)
		}
	}
}

// TestAdstapTemplateNeedsIstiodsRoot: adstap checks istiod against the
// root Istio mounts with pilotCertProvider istiod; with another provider the
// volume is not there, and the pod is refused with the reason instead of
// failing Kubernetes' validation later.
func TestAdstapTemplateNeedsIstiodsRoot(t *testing.T) {
	leakcheck.Check(t)
	other := install{name: "pilotCertProvider custom", set: []string{"values.global.pilotCertProvider=custom"}}
	_, err := injector(t, other, true).Inject(workload(map[string]string{optIn: "sidecar,adstap"}))
	if err == nil || !strings.Contains(err.Error(), `pilotCertProvider is "custom"`) {
		t.Fatalf("injecting with pilotCertProvider custom: %v, want the template's refusal", err)
	}
}
