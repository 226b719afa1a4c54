package istio

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// The start order Kubernetes gives the injected pod: init containers one
// after the other (a native sidecar, restartPolicy: Always, counts as
// started when its startup probe passes, or at once without one; any other
// init container must finish), then the containers, each waiting for the
// postStart hook of those before it.

// startStep is a container's place in the pod's start.
type startStep struct {
	pos  int
	c    *corev1.Container
	kind string
}

func startOrder(pod *corev1.PodTemplateSpec) []startStep {
	var out []startStep
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		kind := "init container, runs to completion"
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			kind = "native sidecar, started at once (no startup probe)"
			if c.StartupProbe != nil {
				kind = "native sidecar, started when its startup probe passes"
			}
		}
		out = append(out, startStep{len(out), c, kind})
	}
	pos := len(out)
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		kind := "container"
		if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
			kind = "container; the next ones wait for its postStart hook"
		}
		out = append(out, startStep{pos, c, kind})
		if c.Lifecycle != nil && c.Lifecycle.PostStart != nil {
			pos++
		}
	}
	return out
}

func position(steps []startStep, name string) int {
	for _, s := range steps {
		if s.c.Name == name {
			return s.pos
		}
	}
	return -1
}

// probeTarget says where a probe goes and which container must be up for it
// to pass. Envoy's readiness (istio-proxy's :15021/healthz/ready) needs its
// first configuration, so it also needs whatever serves discoveryAddress.
func probeTarget(t *testing.T, pod *corev1.PodTemplateSpec, owner *corev1.Container, p *corev1.Probe) (where string, needs []string) {
	t.Helper()
	switch {
	case p.Exec != nil:
		cmd := p.Exec.Command
		where = fmt.Sprintf("exec %s in %s", strings.Join(cmd, " "), owner.Name)
		needs = []string{owner.Name}
		if len(cmd) >= 2 && cmd[0] == "/adstap" && cmd[1] == "probe" {
			admin, _ := env(owner, "ADSTAP_ADMIN")
			if v := flagValue(owner, "admin"); v != "" {
				admin = v
			}
			where += " -> http://" + admin
			for _, a := range cmd[2:] {
				also, ok := strings.CutPrefix(a, "--also-ready=")
				if !ok {
					continue
				}
				u, err := url.Parse(also)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				then := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: u.Path, Port: intstr.Parse(u.Port())}}}
				w, n := probeTarget(t, pod, owner, then)
				where += ", then " + w
				needs = append(needs, n...)
			}
		}
		return where, needs
	case p.HTTPGet != nil:
		port := p.HTTPGet.Port.String()
		where = fmt.Sprintf("httpGet :%s%s", port, p.HTTPGet.Path)
		serves := portOwner(pod, port)
		if serves == "" {
			t.Fatalf("%s: nothing in the pod serves port %s", where, port)
		}
		needs = []string{serves}
		if serves == "istio-proxy" && (port == "15021" || strings.HasPrefix(p.HTTPGet.Path, "/healthz/ready")) {
			xds := agentProxyConfig(t, pod).DiscoveryAddress
			if s := xdsServer(pod, xds); s != "" {
				needs = append(needs, s)
				where += fmt.Sprintf(" (Envoy's readiness: its first configuration, from %s = %s)", xds, s)
			} else {
				where += fmt.Sprintf(" (Envoy's readiness: its first configuration, from %s, outside the pod)", xds)
			}
		}
		return where + " in " + serves, needs
	case p.TCPSocket != nil:
		port := p.TCPSocket.Port.String()
		return "tcpSocket :" + port, []string{portOwner(pod, port)}
	case p.GRPC != nil:
		port := fmt.Sprint(p.GRPC.Port)
		return "grpc :" + port, []string{portOwner(pod, port)}
	}
	t.Fatalf("a probe of %s with no handler", owner.Name)
	return "", nil
}

// portOwner is the container listening on a port of the pod: the one
// declaring it, istio-agent's status ports, or adstap's --admin.
func portOwner(pod *corev1.PodTemplateSpec, port string) string {
	switch port {
	case "15020", "15021", "15090":
		return "istio-proxy"
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			for _, p := range c.Ports {
				if fmt.Sprint(p.ContainerPort) == port || p.Name == port {
					return c.Name
				}
			}
			admin, _ := env(c, "ADSTAP_ADMIN")
			if v := flagValue(c, "admin"); v != "" {
				admin = v
			}
			if admin != "" && strings.HasSuffix(admin, ":"+port) {
				return c.Name
			}
		}
	}
	return ""
}

// xdsServer is the container whose --listen is the agent's discoveryAddress.
func xdsServer(pod *corev1.PodTemplateSpec, addr string) string {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if flagValue(&cs[i], "listen") == addr {
				return cs[i].Name
			}
		}
	}
	return ""
}

type namedProbe struct {
	kind string
	p    *corev1.Probe
}

func probes(c *corev1.Container) []namedProbe {
	var out []namedProbe
	for _, p := range []namedProbe{{"startup", c.StartupProbe}, {"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}} {
		if p.p != nil {
			out = append(out, p)
		}
	}
	return out
}

// startGate says what istio-proxy's start waits for: its startup probe, or
// the postStart hook `pilot-agent wait` (holdApplicationUntilProxyStarts),
// which waits for Envoy's readiness.
func startGate(t *testing.T, pod *corev1.PodTemplateSpec, proxy *corev1.Container) (string, []string) {
	t.Helper()
	if proxy.StartupProbe != nil {
		where, needs := probeTarget(t, pod, proxy, proxy.StartupProbe)
		return "its startup probe, " + where, needs
	}
	if l := proxy.Lifecycle; l != nil && l.PostStart != nil && l.PostStart.Exec != nil {
		ready := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready"}}}
		ready.HTTPGet.Port.StrVal, ready.HTTPGet.Port.Type = "15021", 1
		where, needs := probeTarget(t, pod, proxy, ready)
		return "its postStart hook " + strings.Join(l.PostStart.Exec.Command, " ") + ", " + where, needs
	}
	return "nothing", nil
}

// checkStartOrder describes the pod's start and returns what in it can
// never start: a probe of adstap needing a container that starts after it,
// or istio-proxy's start waiting on one.
func checkStartOrder(t *testing.T, pod *corev1.PodTemplateSpec) (order string, problems []string) {
	t.Helper()
	steps := startOrder(pod)
	if position(steps, "adstap") < 0 || position(steps, "istio-proxy") < 0 {
		t.Fatalf("adstap or istio-proxy missing from the pod")
	}
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, "\n  %d. %s (%s)", s.pos+1, s.c.Name, s.kind)
	}
	for _, name := range []string{"adstap", "istio-proxy"} {
		c := container(t, pod, name)
		for _, p := range probes(c) {
			where, needs := probeTarget(t, pod, c, p.p)
			fmt.Fprintf(&b, "\n  %s %s probe: %s", name, p.kind, where)
			if name != "adstap" {
				continue
			}
			for _, n := range needs {
				if n != name && position(steps, n) >= position(steps, name) {
					problems = append(problems, fmt.Sprintf("adstap's %s probe needs %s, which starts after it", p.kind, n))
				}
			}
		}
	}
	if appWaitsForEnvoy(t, pod) {
		fmt.Fprintf(&b, "\n  the app starts once Envoy is ready")
	} else {
		fmt.Fprintf(&b, "\n  the app may start before Envoy is ready")
	}
	gate, needs := startGate(t, pod, container(t, pod, "istio-proxy"))
	fmt.Fprintf(&b, "\n  istio-proxy's start waits for %s", gate)
	for _, n := range needs {
		if n != "istio-proxy" && position(steps, n) >= position(steps, "istio-proxy") {
			problems = append(problems, fmt.Sprintf("istio-proxy's start waits for %s, which starts after it: the pod never starts", n))
		}
	}
	return b.String(), problems
}

// appWaitsForEnvoy says whether a container that starts before the app
// holds it until Envoy is ready: a native sidecar whose startup probe needs
// istio-proxy's readiness, or a container whose postStart hook waits for it.
func appWaitsForEnvoy(t *testing.T, pod *corev1.PodTemplateSpec) bool {
	t.Helper()
	steps := startOrder(pod)
	app := position(steps, "productpage")
	for _, s := range steps {
		if s.pos >= app || s.c.Name == "productpage" {
			continue
		}
		var needs []string
		switch {
		case s.c.StartupProbe != nil && s.c.RestartPolicy != nil:
			_, needs = probeTarget(t, pod, s.c, s.c.StartupProbe)
		case s.c.Name == "istio-proxy" && s.c.Lifecycle != nil && s.c.Lifecycle.PostStart != nil:
			_, needs = startGate(t, pod, s.c)
		}
		if slices.Contains(needs, "istio-proxy") {
			return true
		}
	}
	return false
}

// TestAdstapTemplateKeepsTheAppWaitingForEnvoy: wherever Istio alone
// starts the app only once Envoy is ready (native sidecars, by istio-proxy's
// startup probe; holdApplicationUntilProxyStarts), it still does with
// adstap; and where it does not, adstap does not add a wait.
func TestAdstapTemplateKeepsTheAppWaitingForEnvoy(t *testing.T) {
	leakcheck.Check(t)
	for _, hold := range []bool{false, true} {
		own := map[string]string{}
		if hold {
			own["proxy.istio.io/config"] = "holdApplicationUntilProxyStarts: true\n"
		}
		eachInstallAndMode(t, func(t *testing.T, in install, native bool) {
			plainAnn := map[string]string{"sidecar.istio.io/nativeSidecar": fmt.Sprint(native)}
			for k, v := range own {
				plainAnn[k] = v
			}
			plain, err := injector(t, in, false).Inject(workload(plainAnn))
			if err != nil {
				t.Fatal(err)
			}
			want := appWaitsForEnvoy(t, plain)
			if got := appWaitsForEnvoy(t, injectAdstap(t, in, native, own)); got != want {
				t.Errorf("hold %v: with adstap, the app waits for Envoy: %v; with Istio alone: %v", hold, got, want)
			}
		})
	}
}

// TestAdstapTemplateStartOrder: in every sidecar mode and install, no probe
// of adstap needs a container that starts after it, and istio-proxy's start
// waits on nothing that starts after it. The log shows the order and where
// each probe goes.
func TestAdstapTemplateStartOrder(t *testing.T) {
	leakcheck.Check(t)
	for _, in := range installs {
		for _, native := range sidecarModes {
			for _, hold := range []bool{false, true} {
				name := in.name + "/" + modeName(native)
				own := map[string]string{}
				if hold {
					name += "/holdApplicationUntilProxyStarts"
					own["proxy.istio.io/config"] = "holdApplicationUntilProxyStarts: true\n"
				}
				t.Run(name, func(t *testing.T) {
					order, problems := checkStartOrder(t, injectAdstap(t, in, native, own))
					for _, p := range problems {
						t.Error(p)
					}
					t.Logf("start order:%s", order)
				})
			}
		}
	}
}

// TestStartOrderCheckFindsTheDeadlocks shows the check above fails on the
// pods it is there for: istio-proxy as a native sidecar keeping Istio's
// startup probe (it waits for a configuration only adstap, started after
// it, can bring), and the retired patch's HTTP startup probe of adstap,
// which Istio's injector rewrites to go through istio-agent (istio-proxy,
// started after adstap).
func TestStartOrderCheckFindsTheDeadlocks(t *testing.T) {
	leakcheck.Check(t)
	in := installs[0]
	plain, err := injector(t, in, false).Inject(workload(map[string]string{"sidecar.istio.io/nativeSidecar": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	keptProbe := injectAdstap(t, in, true, nil)
	container(t, keptProbe, "istio-proxy").StartupProbe = container(t, plain, "istio-proxy").StartupProbe
	if _, problems := checkStartOrder(t, keptProbe); len(problems) == 0 {
		t.Error("a native istio-proxy waiting for Envoy's readiness before adstap starts passed the check")
	} else {
		t.Logf("kept startup probe: %v", problems)
	}

	// What the retired strategic-merge patch (deploy/sidecar.yaml) made of
	// a workload: adstap as a native sidecar with an HTTP startup probe,
	// istio-proxy a container. Istio's injector rewrites the probe to go
	// through istio-agent (pkg/kube/inject/app_probe.go).
	patched := workload(map[string]string{
		"sidecar.istio.io/nativeSidecar": "false",
		"proxy.istio.io/config":          "discoveryAddress: 127.0.0.1:15100\ncontrolPlaneAuthPolicy: NONE\n",
	})
	always := corev1.ContainerRestartPolicyAlways
	ready := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz"}}}
	ready.HTTPGet.Port.StrVal, ready.HTTPGet.Port.Type = "admin", 1
	patched.Spec.Template.Spec.InitContainers = []corev1.Container{{
		Name: "adstap", Image: "ghcr.io/adstap/adstap:latest", RestartPolicy: &always,
		Args:         []string{"run", "--listen=127.0.0.1:15100", "--admin=0.0.0.0:15101"},
		Ports:        []corev1.ContainerPort{{Name: "admin", ContainerPort: 15101}},
		StartupProbe: ready,
	}}
	rewritten, err := injector(t, in, false).Inject(patched)
	if err != nil {
		t.Fatal(err)
	}
	if _, problems := checkStartOrder(t, rewritten); len(problems) == 0 {
		t.Error("the retired patch, as Istio injects it, passed the check")
	} else {
		t.Logf("the retired patch: %v (startup probe now %s)", problems, container(t, rewritten, "adstap").StartupProbe.HTTPGet.Path)
	}
}
