package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The manifests users copy from deploy/, each checked against the Kubernetes
// API types and against the flags the adstap binary really has. The alert
// rules have their own checks (rules_test.go).

var (
	// wantManifests are the files docs/deploy.md sends users to.
	wantManifests = []string{"debug-pod.yaml", "debug-target.yaml", "jaeger.yaml"}
	// ruleFiles are not Kubernetes objects; rules_test.go checks them.
	ruleFiles = []string{"alerts.yaml", "alerts_test.yaml"}
	// templateFiles are Istio injection templates (Go templates over a pod),
	// not Kubernetes objects: istio_files_test.go, reach_test.go and the
	// Istio suite (istio/, through Istio's own injector) check them.
	templateFiles = []string{"sidecar.yaml"}
)

// ruleKind is checked by rules_test.go: its type is not in k8s.io/api.
const ruleKind = "monitoring.coreos.com/v1/PrometheusRule"

// kinds maps apiVersion/kind to the Go type a document decodes into. A kind
// missing here fails the test: add it rather than skip the check.
var kinds = map[string]func() any{
	"v1/ConfigMap":                       func() any { return new(corev1.ConfigMap) },
	"v1/Namespace":                       func() any { return new(corev1.Namespace) },
	"v1/Pod":                             func() any { return new(corev1.Pod) },
	"v1/Secret":                          func() any { return new(corev1.Secret) },
	"v1/Service":                         func() any { return new(corev1.Service) },
	"v1/ServiceAccount":                  func() any { return new(corev1.ServiceAccount) },
	"apps/v1/DaemonSet":                  func() any { return new(appsv1.DaemonSet) },
	"apps/v1/Deployment":                 func() any { return new(appsv1.Deployment) },
	"apps/v1/StatefulSet":                func() any { return new(appsv1.StatefulSet) },
	"networking.k8s.io/v1/NetworkPolicy": func() any { return new(networkingv1.NetworkPolicy) },
	"policy/v1/PodDisruptionBudget":      func() any { return new(policyv1.PodDisruptionBudget) },
}

// manifest is one document of a YAML file in deploy/.
type manifest struct {
	file string
	doc  int    // 1-based, among the non-empty documents
	kind string // apiVersion/kind
	obj  any    // *corev1.Service, *appsv1.Deployment, ...
}

func (m manifest) String() string { return fmt.Sprintf("%s (document %d, %s)", m.file, m.doc, m.kind) }

// decodeManifests splits a multi-document file and decodes each document
// strictly into its API type: an unknown or misspelt field, a field in the
// wrong case, or a key given twice fails, as the API server would refuse it.
func decodeManifests(file string, data []byte) ([]manifest, error) {
	var out []manifest
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		j, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			return nil, fmt.Errorf("%s (document %d): %w", file, n, err)
		}
		if t := bytes.TrimSpace(j); bytes.Equal(t, []byte("null")) || len(t) == 0 {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil {
			return nil, fmt.Errorf("%s (document %d): %w", file, n, err)
		}
		m := manifest{file: file, doc: n, kind: tm.APIVersion + "/" + tm.Kind}
		n++
		if m.kind == ruleKind {
			continue
		}
		newObj, ok := kinds[m.kind]
		if !ok {
			return nil, fmt.Errorf("%s: no API type known for %q (add it to kinds in manifests_test.go)", m, m.kind)
		}
		m.obj = newObj()
		strictErrs, err := kjson.UnmarshalStrict(j, m.obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
		if len(strictErrs) > 0 {
			return nil, fmt.Errorf("%s: %w", m, errors.Join(strictErrs...))
		}
		out = append(out, m)
	}
}

var (
	manifestsOnce sync.Once
	manifestsAll  []manifest
	manifestsErr  error
)

// loadManifests decodes every YAML file of deploy/ but the rule files and
// the injection template.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	manifestsOnce.Do(func() {
		files, err := filepath.Glob("*.yaml")
		if err != nil {
			manifestsErr = err
			return
		}
		yml, _ := filepath.Glob("*.yml")
		files = append(files, yml...)
		var errs []error
		for _, f := range files {
			if slices.Contains(ruleFiles, f) || slices.Contains(templateFiles, f) {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			ms, err := decodeManifests(f, data)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if len(ms) == 0 && !bytes.Contains(data, []byte("kind: PrometheusRule")) {
				errs = append(errs, fmt.Errorf("%s: no Kubernetes object in it", f))
			}
			manifestsAll = append(manifestsAll, ms...)
		}
		manifestsErr = errors.Join(errs...)
	})
	if manifestsErr != nil {
		t.Fatal(manifestsErr)
	}
	return manifestsAll
}

func TestManifestsDecodeStrictly(t *testing.T) {
	leakcheck.Check(t)
	ms := loadManifests(t)
	for _, want := range wantManifests {
		if !slices.ContainsFunc(ms, func(m manifest) bool { return m.file == want }) {
			t.Errorf("%s: missing (docs/deploy.md sends users to it)", want)
		}
	}
	for _, m := range ms {
		t.Logf("%s: ok", m)
	}
}

// TestStrictDecodingCatchesMistakes shows the decoder above fails on the
// mistakes it is there for, so a green TestManifestsDecodeStrictly means
// something.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	leakcheck.Check(t)
	good := `apiVersion: apps/v1
kind: Deployment
spec:
  template:
    spec:
      containers:
        - name: adstap
          image: x
          ports:
            - containerPort: 15101
`
	if _, err := decodeManifests("good.yaml", []byte(good)); err != nil {
		t.Fatalf("a valid Deployment fails: %v", err)
	}
	for _, tc := range []struct{ name, doc string }{
		{"unknown field", strings.Replace(good, "image: x", "image: x\n          restartPolcy: Always", 1)},
		{"wrong case", strings.Replace(good, "containerPort", "ContainerPort", 1)},
		{"duplicate key", strings.Replace(good, "image: x", "image: x\n          image: y", 1)},
		{"wrong type", strings.Replace(good, "15101", "[15101]", 1)},
		{"unknown kind", strings.Replace(good, "kind: Deployment", "kind: Deploymnet", 1)},
		{"second document", good + "---\napiVersion: v1\nkind: Service\nspec:\n  prots: []\n"},
	} {
		if _, err := decodeManifests(tc.name+".yaml", []byte(tc.doc)); err == nil {
			t.Errorf("%s: decoded without error", tc.name)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}

// cli is what `adstap run --help` says the binary accepts.
type cli struct {
	flags      map[string]cliFlag // by name, without dashes
	env        map[string]string  // ADSTAP_X -> flag name
	otel       []string           // OTEL_ variables named in the help; a trailing _ is a prefix (OTEL_EXPORTER_OTLP_*)
	adminPaths []string           // the paths the admin server serves, from --admin's help
}

type cliFlag struct {
	isBool bool
	def    string
	help   string
}

var (
	cliOnce sync.Once
	cliVal  cli
	cliErr  error
)

// goTool is the go command running the tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go" // exec says it is not found

}

// adstapCLI reads the real flag set: it runs `adstap run --help` once.
func adstapCLI(t *testing.T) cli {
	t.Helper()
	cliOnce.Do(func() {
		cmd := exec.Command(goTool(), "run", "../cmd/adstap", "run", "--help")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			cliErr = fmt.Errorf("adstap run --help: %v\n%s", err, stderr.Bytes())
			return
		}
		cliVal, cliErr = parseHelp(string(out))
	})
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	return cliVal
}

var (
	helpFlagLine = regexp.MustCompile(`^  --([a-z0-9][a-z0-9-]*)(=\S+)?$`)
	helpEnvLine  = regexp.MustCompile(`^      \(env (ADSTAP_[A-Z0-9_]+)(?:; default (.*))?\)$`)
	helpOTel     = regexp.MustCompile(`OTEL_[A-Z0-9_]*[A-Z0-9]_?\*?`)
	helpPath     = regexp.MustCompile(`(?:^|\s)(/[a-z][a-z/]*[a-z])`)
)

func parseHelp(help string) (cli, error) {
	c := cli{flags: map[string]cliFlag{}, env: map[string]string{}}
	var name string
	var f cliFlag
	for line := range strings.SplitSeq(help, "\n") {
		if m := helpFlagLine.FindStringSubmatch(line); m != nil {
			name, f = m[1], cliFlag{isBool: m[2] == ""}
			continue
		}
		if name == "" {
			continue
		}
		if m := helpEnvLine.FindStringSubmatch(line); m != nil {
			f.def = m[2]
			c.flags[name] = f
			c.env[m[1]] = name
			name = ""
			continue
		}
		f.help += strings.TrimSpace(line) + " "
	}
	for _, m := range helpOTel.FindAllString(help, -1) {
		c.otel = append(c.otel, strings.TrimSuffix(m, "*"))
	}
	for _, m := range helpPath.FindAllStringSubmatch(c.flags["admin"].help, -1) {
		c.adminPaths = append(c.adminPaths, m[1])
	}
	switch {
	case len(c.flags) < 10:
		return c, fmt.Errorf("read only %d flags from adstap run --help:\n%s", len(c.flags), help)
	case c.flags["admin"].def == "" || c.flags["listen"].def == "":
		return c, fmt.Errorf("no default for --admin or --listen in adstap run --help:\n%s", help)
	case !slices.Contains(c.adminPaths, "/healthz") || !slices.Contains(c.adminPaths, "/readyz"):
		return c, fmt.Errorf("--admin's help names no /healthz and /readyz: %q", c.flags["admin"].help)
	}
	return c, nil
}

// knownOTel reports whether an OTEL_ variable is one the help names.
func (c cli) knownOTel(name string) bool {
	for _, o := range c.otel {
		if name == o || strings.HasSuffix(o, "_") && strings.HasPrefix(name, o) {
			return true
		}
	}
	return false
}

// pod is the pod template of a workload, or a Pod.
type pod struct {
	m    manifest
	meta metav1.ObjectMeta // the template's
	ns   string            // the workload's namespace
	spec corev1.PodSpec
}

func pods(ms []manifest) []pod {
	var out []pod
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			out = append(out, pod{m, o.Spec.Template.ObjectMeta, o.Namespace, o.Spec.Template.Spec})
		case *appsv1.StatefulSet:
			out = append(out, pod{m, o.Spec.Template.ObjectMeta, o.Namespace, o.Spec.Template.Spec})
		case *appsv1.DaemonSet:
			out = append(out, pod{m, o.Spec.Template.ObjectMeta, o.Namespace, o.Spec.Template.Spec})
		case *corev1.Pod:
			out = append(out, pod{m, o.ObjectMeta, o.Namespace, o.Spec})
		}
	}
	return out
}

func (p pod) containers() []corev1.Container {
	return append(slices.Clone(p.spec.InitContainers), p.spec.Containers...)
}

// imageRepo is the repository `make image` tags: the manifests must run it.
func imageRepo(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE_REPO\s*\?=\s*(\S+)\s*$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no IMAGE_REPO ?= ... (the image target's repository)")
	}
	return string(m[1])
}

func isAdstap(c corev1.Container, repo string) bool {
	image, _, _ := strings.Cut(c.Image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image == repo
}

// tapConfig is an adstap container's effective settings: its flags, then
// its env twins, then the binary's defaults.
type tapConfig struct {
	where    string
	args     map[string]string
	env      map[string]string // ADSTAP_ twins with a literal value
	cli      cli
	problems []string // what is wrong with its flags and variables
}

func (tc tapConfig) get(flag string) string {
	if v, ok := tc.args[flag]; ok {
		return v
	}
	if v, ok := tc.env[envTwin(flag)]; ok {
		return v
	}
	return tc.cli.flags[flag].def
}

func envTwin(flag string) string {
	return "ADSTAP_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// readTap checks an adstap container's command line and environment against
// the binary's flag set and returns its settings.
func readTap(p pod, c corev1.Container, cl cli) tapConfig {
	tc := tapConfig{where: fmt.Sprintf("%s: container %s", p.m, c.Name), args: map[string]string{}, env: map[string]string{}, cli: cl}
	fail := func(format string, a ...any) { tc.problems = append(tc.problems, fmt.Sprintf(format, a...)) }
	if len(c.Command) > 0 {
		fail("sets command %q; the image's entrypoint is /adstap, give the subcommand in args", c.Command)
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		fail("args %q: want the subcommand run first", c.Args)
	}
	for _, a := range c.Args[min(1, len(c.Args)):] {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		f, ok := cl.flags[name]
		switch {
		case !strings.HasPrefix(a, "--"):
			fail("argument %q: want --flag=value", a)
			continue
		case !ok:
			fail("flag --%s: adstap run has no such flag", name)
			continue
		case f.isBool && hasValue && value != "true" && value != "false":
			fail("flag %s: a boolean flag takes true or false", a)
		case f.isBool && !hasValue:
			value = "true"
		case !f.isBool && !hasValue:
			fail("flag --%s: write --%s=value, in one argument", name, name)
		}
		if _, dup := tc.args[name]; dup {
			fail("flag --%s given twice", name)
		}
		tc.args[name] = value
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			fail("env %s set twice", e.Name)
		}
		seen[e.Name] = true
		switch {
		case strings.HasPrefix(e.Name, "ADSTAP_"):
			flag, ok := cl.env[e.Name]
			if !ok {
				fail("env %s: adstap run has no such variable", e.Name)
				continue
			}
			if _, both := tc.args[flag]; both {
				fail("env %s and flag --%s both set: the flag wins, the variable is dead", e.Name, flag)
			}
			if e.ValueFrom == nil {
				tc.env[e.Name] = e.Value
			}
		case strings.HasPrefix(e.Name, "OTEL_"):
			if !cl.knownOTel(e.Name) {
				fail("env %s: not an OpenTelemetry variable adstap's help names (%v)", e.Name, cl.otel)
			}
		}
	}
	return tc
}

func (tc tapConfig) hostPort(flag string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(tc.get(flag))
	if err != nil {
		return "", 0, fmt.Errorf("%s: --%s=%q: %w", tc.where, flag, tc.get(flag), err)
	}
	port, err = strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("%s: --%s=%q: %w", tc.where, flag, tc.get(flag), err)
	}
	return h, port, nil
}

type tap struct {
	p   pod
	c   corev1.Container
	cfg tapConfig
}

// taps are the adstap containers of every manifest.
func taps(t *testing.T) []tap {
	t.Helper()
	cl := adstapCLI(t)
	repo := imageRepo(t)
	var out []tap
	for _, p := range pods(loadManifests(t)) {
		for _, c := range p.containers() {
			if isAdstap(c, repo) {
				out = append(out, tap{p, c, readTap(p, c, cl)})
			} else if c.Name == "adstap" {
				t.Errorf("%s: container adstap runs image %q, not %s (Makefile IMAGE_REPO)", p.m, c.Image, repo)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no container runs %s", repo)
	}
	return out
}

// TestTapFlagsExist: every flag and ADSTAP_ variable a manifest gives adstap
// is one the binary has.
func TestTapFlagsExist(t *testing.T) {
	leakcheck.Check(t)
	for _, tp := range taps(t) {
		for _, e := range tp.cfg.problems {
			t.Errorf("%s: %s", tp.cfg.where, e)
		}
	}
}

func containerPort(c corev1.Container, name string) (int, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort), true
		}
	}
	return 0, false
}

func unspecified(host string) bool { return host == "" || host == "0.0.0.0" || host == "::" }

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// TestTapAdminPortAndProbes: the admin address (the pages, captures and
// configuration) stays on loopback, where the exec probes reach it; the port
// Prometheus scrapes is --metrics-listen's, which serves /metrics alone, on
// an address Prometheus reaches.
func TestTapAdminPortAndProbes(t *testing.T) {
	leakcheck.Check(t)
	for _, tp := range taps(t) {
		where := tp.cfg.where
		host, _, err := tp.cfg.hostPort("admin")
		if err != nil {
			t.Error(err)
			continue
		}
		if !loopback(host) {
			t.Errorf("%s: --admin=%s: the admin address shows every proxy's configuration; keep it on loopback (127.0.0.1) and let Prometheus scrape --metrics-listen", where, tp.cfg.get("admin"))
		}
		if _, ok := containerPort(tp.c, "admin"); ok {
			t.Errorf("%s: a container port named admin: the admin address is on loopback, no other pod reaches it", where)
		}
		scraped := tp.p.meta.Annotations["prometheus.io/scrape"] == "true"
		var port int
		if scraped {
			var mhost string
			mhost, port, err = tp.cfg.hostPort("metrics-listen")
			switch {
			case err != nil:
				t.Errorf("%s: scraped by Prometheus, without --metrics-listen: %v", where, err)
			case !unspecified(mhost):
				t.Errorf("%s: --metrics-listen=%s: Prometheus scrapes it from outside the pod; listen on 0.0.0.0", where, tp.cfg.get("metrics-listen"))
			}
			if got, ok := containerPort(tp.c, "metrics"); !ok || got != port {
				t.Errorf("%s: container port metrics is %d (present: %v), --metrics-listen listens on %d", where, got, ok, port)
			}
		}
		probes := []struct {
			kind     string
			probe    *corev1.Probe
			check    string
			required bool
		}{
			{"liveness", tp.c.LivenessProbe, "healthz", true},
			{"readiness", tp.c.ReadinessProbe, "readyz", true},
			{"startup", tp.c.StartupProbe, "readyz", false},
		}
		for _, pr := range probes {
			if pr.probe == nil {
				if pr.required {
					t.Errorf("%s: no %s probe", where, pr.kind)
				}
				continue
			}
			// adstap probe asks the admin address of ADSTAP_ADMIN or its
			// own default, which is adstap run's: the same address as the
			// container's unless --admin is given on run's command line only.
			want := []string{"/adstap", "probe", pr.check}
			switch e := pr.probe.Exec; {
			case e == nil:
				t.Errorf("%s: %s probe: want exec %q (an HTTP probe needs the admin address off loopback, and Istio's injector rewrites it)", where, pr.kind, want)
			case !slices.Equal(e.Command, want):
				t.Errorf("%s: %s probe runs %q, want %q", where, pr.kind, e.Command, want)
			case tp.cfg.args["admin"] != "" && tp.cfg.env[envTwin("admin")] != tp.cfg.args["admin"]:
				t.Errorf("%s: --admin=%s on the command line: adstap probe cannot see it; set ADSTAP_ADMIN instead, which both read", where, tp.cfg.args["admin"])
			}
		}
		if scraped {
			a := tp.p.meta.Annotations
			if a["prometheus.io/port"] != strconv.Itoa(port) {
				t.Errorf("%s: prometheus.io/port %q, want the metrics port %d", where, a["prometheus.io/port"], port)
			}
			if a["prometheus.io/path"] != "/metrics" || !strings.Contains(tp.cfg.cli.flags["metrics-listen"].help, "/metrics") {
				t.Errorf("%s: prometheus.io/path %q, want /metrics (--metrics-listen: %q)", where, a["prometheus.io/path"], tp.cfg.cli.flags["metrics-listen"].help)
			}
		}
		if xdsPort, ok := containerPort(tp.c, "grpc-xds"); ok {
			lh, lp, err := tp.cfg.hostPort("listen")
			switch {
			case err != nil:
				t.Error(err)
			case lp != xdsPort:
				t.Errorf("%s: container port grpc-xds is %d, --listen is on %d", where, xdsPort, lp)
			case !unspecified(lh):
				t.Errorf("%s: --listen=%s behind a container port: clients from other pods need 0.0.0.0", where, tp.cfg.get("listen"))
			}
		}
	}
}

// TestTapSecurityContext: restricted, on the container itself (a sidecar
// cannot count on the pod's settings).
func TestTapSecurityContext(t *testing.T) {
	leakcheck.Check(t)
	for _, tp := range taps(t) {
		sc := tp.c.SecurityContext
		if sc == nil {
			t.Errorf("%s: no securityContext", tp.cfg.where)
			continue
		}
		var problems []string
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			problems = append(problems, "runAsNonRoot: true")
		}
		if sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
			problems = append(problems, "runAsUser: 65532 (the image's nonroot user)")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			problems = append(problems, "readOnlyRootFilesystem: true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			problems = append(problems, "allowPrivilegeEscalation: false")
		}
		if sc.Privileged != nil && *sc.Privileged {
			problems = append(problems, "no privileged")
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			problems = append(problems, "capabilities: drop [ALL], add nothing")
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			problems = append(problems, "seccompProfile: RuntimeDefault")
		}
		if len(problems) > 0 {
			t.Errorf("%s: securityContext wants %s", tp.cfg.where, strings.Join(problems, ", "))
		}
	}
}

// TestTapFilesComeFromVolumes: every certificate or CA file adstap is told
// to read is under one of its mounts, and the mesh root CA is read under the
// key istiod writes (root-cert.pem of the istio-ca-root-cert ConfigMap).
func TestTapFilesComeFromVolumes(t *testing.T) {
	leakcheck.Check(t)
	for _, tp := range taps(t) {
		for _, flag := range []string{"upstream-ca", "upstream-cert", "upstream-key", "listen-cert", "listen-key", "listen-client-ca"} {
			file := tp.cfg.get(flag)
			if file == "" {
				continue
			}
			i := slices.IndexFunc(tp.c.VolumeMounts, func(vm corev1.VolumeMount) bool {
				return strings.HasPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")
			})
			if i < 0 {
				t.Errorf("%s: --%s=%s is under none of the container's mounts", tp.cfg.where, flag, file)
				continue
			}
			vm := tp.c.VolumeMounts[i]
			vi := slices.IndexFunc(tp.p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
			if vi < 0 {
				continue // TestVolumeMountsHaveVolumes reports it
			}
			if cm := tp.p.spec.Volumes[vi].ConfigMap; cm != nil && cm.Name == "istio-ca-root-cert" {
				key := strings.TrimPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")
				if key != "root-cert.pem" {
					t.Errorf("%s: --%s=%s: the istio-ca-root-cert ConfigMap has the key root-cert.pem, not %s", tp.cfg.where, flag, file, key)
				}
			}
		}
	}
}

// TestCaptureGoesToABoundedVolume: the root filesystem is read-only, so a
// capture needs a writable mount, and an emptyDir whose size limit holds
// every file the rotation keeps, so a busy tap is not evicted for it.
func TestCaptureGoesToABoundedVolume(t *testing.T) {
	leakcheck.Check(t)
	for _, tp := range taps(t) {
		file := tp.cfg.get("capture")
		if file == "" {
			continue
		}
		i := slices.IndexFunc(tp.c.VolumeMounts, func(vm corev1.VolumeMount) bool {
			return strings.HasPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/")
		})
		if i < 0 || tp.c.VolumeMounts[i].ReadOnly {
			t.Errorf("%s: --capture=%s is under no writable mount", tp.cfg.where, file)
			continue
		}
		vi := slices.IndexFunc(tp.p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == tp.c.VolumeMounts[i].Name })
		if vi < 0 {
			continue // TestVolumeMountsHaveVolumes reports it
		}
		ed := tp.p.spec.Volumes[vi].EmptyDir
		if ed == nil || ed.SizeLimit == nil {
			t.Errorf("%s: --capture=%s: want an emptyDir with a sizeLimit", tp.cfg.where, file)
			continue
		}
		// adstap's 64MiB is Kubernetes' 64Mi.
		maxBytes, err := resource.ParseQuantity(strings.TrimSuffix(tp.cfg.get("capture-max-bytes"), "B"))
		if err != nil {
			t.Errorf("%s: --capture-max-bytes: %v", tp.cfg.where, err)
			continue
		}
		files, err := strconv.Atoi(tp.cfg.get("capture-max-files"))
		if err != nil {
			t.Errorf("%s: --capture-max-files: %v", tp.cfg.where, err)
			continue
		}
		if need := maxBytes.Value() * int64(files); ed.SizeLimit.Value() < need {
			t.Errorf("%s: emptyDir sizeLimit %s holds less than %d files of %s", tp.cfg.where, ed.SizeLimit, files, tp.cfg.get("capture-max-bytes"))
		}
	}
}

func TestVolumeMountsHaveVolumes(t *testing.T) {
	leakcheck.Check(t)
	for _, p := range pods(loadManifests(t)) {
		for _, c := range p.containers() {
			for _, vm := range c.VolumeMounts {
				if !slices.ContainsFunc(p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }) {
					t.Errorf("%s: container %s mounts volume %s, which the pod template does not define", p.m, c.Name, vm.Name)
				}
			}
		}
	}
}

// TestResources: every container says what it needs; adstap's memory limit
// leaves room above what was measured (docs/deploy.md).
func TestResources(t *testing.T) {
	leakcheck.Check(t)
	repo := imageRepo(t)
	for _, p := range pods(loadManifests(t)) {
		for _, c := range p.containers() {
			r := c.Resources
			where := fmt.Sprintf("%s: container %s", p.m, c.Name)
			req, lim := r.Requests.Memory(), r.Limits.Memory()
			if r.Requests.Cpu().IsZero() || req.IsZero() {
				t.Errorf("%s: want cpu and memory requests", where)
			}
			if lim.IsZero() {
				t.Errorf("%s: want a memory limit", where)
			} else if lim.Cmp(*req) < 0 {
				t.Errorf("%s: memory limit %s below its request %s", where, lim, req)
			}
			if isAdstap(c, repo) && lim.Value() < 128<<20 {
				t.Errorf("%s: memory limit %s: adstap measured 32 MiB with no large push in flight; allow at least 128Mi", where, lim)
			}
		}
	}
}

// TestServicesSelectPods: each Service selects a pod template of the
// manifests, in its namespace, and its target ports are that pod's ports.
func TestServicesSelectPods(t *testing.T) {
	leakcheck.Check(t)
	ms := loadManifests(t)
	all := pods(ms)
	for _, m := range ms {
		svc, ok := m.obj.(*corev1.Service)
		if !ok {
			continue
		}
		if len(svc.Spec.Selector) == 0 {
			t.Errorf("%s: no selector", m)
			continue
		}
		var selected []pod
		for _, p := range all {
			if p.ns == svc.Namespace && selects(svc.Spec.Selector, p.meta.Labels) {
				selected = append(selected, p)
			}
		}
		if len(selected) == 0 {
			t.Errorf("%s: selector %v matches no pod template in deploy/", m, svc.Spec.Selector)
			continue
		}
		for _, sp := range svc.Spec.Ports {
			for _, p := range selected {
				if _, ok := targetPort(p, sp); !ok {
					t.Errorf("%s: port %s targets %s, which %s does not expose", m, sp.Name, sp.TargetPort.String(), p.m)
				}
			}
		}
	}
}

func selects(selector, podLabels map[string]string) bool {
	for k, v := range selector {
		if podLabels[k] != v {
			return false
		}
	}
	return true
}

// targetPort finds the container a Service port reaches.
func targetPort(p pod, sp corev1.ServicePort) (corev1.Container, bool) {
	tp := sp.TargetPort
	if tp.Type == intstr.Int && tp.IntVal == 0 {
		tp = intstr.FromInt32(sp.Port)
	}
	for _, c := range p.containers() {
		for _, cp := range c.Ports {
			if tp.Type == intstr.String && cp.Name == tp.StrVal || tp.Type == intstr.Int && cp.ContainerPort == tp.IntVal {
				return c, true
			}
		}
	}
	return corev1.Container{}, false
}

// proxyConfig is the proxy.istio.io/config annotation of a pod template.
func proxyConfig(t *testing.T, p pod) map[string]any {
	t.Helper()
	v, ok := p.meta.Annotations["proxy.istio.io/config"]
	if !ok {
		t.Fatalf("%s: no proxy.istio.io/config annotation", p.m)
	}
	var pc map[string]any
	if err := yaml.UnmarshalStrict([]byte(v), &pc); err != nil {
		t.Fatalf("%s: proxy.istio.io/config: %v", p.m, err)
	}
	known := []string{"discoveryAddress", "controlPlaneAuthPolicy", "holdApplicationUntilProxyStarts", "proxyMetadata"}
	for k := range pc {
		if !slices.Contains(known, k) {
			t.Errorf("%s: proxy.istio.io/config: %s is none of the ProxyConfig fields this check knows (%v)", p.m, k, known)
		}
	}
	return pc
}

func onePod(t *testing.T, file string) pod {
	t.Helper()
	var found []pod
	for _, p := range pods(loadManifests(t)) {
		if p.m.file == file {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: want one pod template, found %d", file, len(found))
	}
	return found[0]
}

// TestDebugPodReachable follows debug-target.yaml's discoveryAddress to the
// Service of debug-pod.yaml and on to adstap's listener.
func TestDebugPodReachable(t *testing.T) {
	leakcheck.Check(t)
	target := onePod(t, "debug-target.yaml")
	pc := proxyConfig(t, target)
	addr, _ := pc["discoveryAddress"].(string)
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("debug-target.yaml: discoveryAddress %q: %v", addr, err)
	}
	name, ns, ok := strings.Cut(strings.TrimSuffix(host, ".svc"), ".")
	if !ok || !strings.HasSuffix(host, ".svc") {
		t.Fatalf("debug-target.yaml: discoveryAddress %q: want SERVICE.NAMESPACE.svc:PORT", addr)
	}
	ms := loadManifests(t)
	var svc *corev1.Service
	for _, m := range ms {
		if s, ok := m.obj.(*corev1.Service); ok && m.file == "debug-pod.yaml" && s.Name == name && s.Namespace == ns {
			svc = s
		}
	}
	if svc == nil {
		t.Fatalf("debug-target.yaml: discoveryAddress %s: debug-pod.yaml has no Service %s in %s", addr, name, ns)
	}
	port, _ := strconv.Atoi(portStr)
	i := slices.IndexFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return int(sp.Port) == port })
	if i < 0 {
		t.Fatalf("debug-target.yaml: Service %s has no port %d", name, port)
	}
	var reached []tap
	for _, tp := range taps(t) {
		if tp.p.m.file != "debug-pod.yaml" || tp.p.ns != ns || !selects(svc.Spec.Selector, tp.p.meta.Labels) {
			continue
		}
		c, ok := targetPort(tp.p, svc.Spec.Ports[i])
		if !ok || c.Name != tp.c.Name {
			continue
		}
		reached = append(reached, tp)
	}
	if len(reached) != 1 {
		t.Fatalf("debug-target.yaml: %s reaches %d adstap containers, want 1", addr, len(reached))
	}
	tp := reached[0]
	xdsPort, _ := containerPort(tp.c, "grpc-xds")
	_, lp, err := tp.cfg.hostPort("listen")
	if err != nil {
		t.Fatal(err)
	}
	if lp != xdsPort {
		t.Errorf("debug-pod.yaml: the Service reaches port %d, adstap listens on %d", xdsPort, lp)
	}
	plaintext := tp.cfg.get("listen-cert") == ""
	if plaintext != (pc["controlPlaneAuthPolicy"] == "NONE") {
		t.Errorf("debug-target.yaml: controlPlaneAuthPolicy %v, but adstap's listener is plaintext=%v", pc["controlPlaneAuthPolicy"], plaintext)
	}
	if tp.cfg.get("metrics-node-label") != "true" {
		t.Errorf("debug-pod.yaml: want --metrics-node-label: a debugging tap in front of a few proxies")
	}
	if tp.p.meta.Labels["sidecar.istio.io/inject"] != "false" {
		t.Errorf("debug-pod.yaml: want the label sidecar.istio.io/inject: \"false\": the tap itself stays out of the mesh")
	}
}

// TestDocsUseRealVariablesAndFiles: the OpenTelemetry variables and the files the
// deployment page names exist. Its flags and ADSTAP_* variables, and every
// other page's, are cmd/adstap's TestDocsNameRealFlagsWithTheirDefaults.
func TestDocsUseRealVariablesAndFiles(t *testing.T) {
	leakcheck.Check(t)
	cl := adstapCLI(t)
	doc, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, m := range regexp.MustCompile(`\bOTEL_[A-Z0-9_]*[A-Z0-9]\b`).FindAllString(text, -1) {
		if !cl.knownOTel(m) {
			t.Errorf("docs/deploy.md: %s is no OpenTelemetry variable adstap's help names", m)
		}
	}
	for _, m := range regexp.MustCompile(`\bdeploy/([a-z0-9_/-]+\.(?:yaml|tmpl))\b`).FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat(m[1]); err != nil {
			t.Errorf("docs/deploy.md: names deploy/%s, which does not exist", m[1])
		}
	}
	for _, f := range wantManifests {
		if !strings.Contains(text, "deploy/"+f) {
			t.Errorf("docs/deploy.md: never mentions deploy/%s", f)
		}
	}
}
