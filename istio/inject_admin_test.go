package istio

import (
	"context"
	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"go.uber.org/goleak"
	"istio.io/istio/pilot/cmd/pilot-agent/status"
	"istio.io/istio/pkg/model"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// The injected adstap, started as kubelet would start it: the image's
// entrypoint (/adstap, here a binary built from this tree) with the
// container's args and literal environment. Its ports and mount paths are
// moved to free ones and temporary directories, the same way in every
// container of the pod, so the pod's wiring is kept.

// podPorts are the pod's ports this test moves: adstap's listener, admin
// and metrics, the app's metrics, Envoy's readiness.
var podPorts = []string{"15100", "15101", "15102", "9080", "15021"}

// remap moves the pod's ports and paths for one test.
type remap struct {
	ports map[string]string
	r     *strings.Replacer
}

func newRemap(t *testing.T, dirs ...string) *remap {
	t.Helper()
	m := &remap{ports: map[string]string{}}
	var pairs []string
	for _, p := range podPorts {
		// Held open until all are taken, so no two are the same.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, m.ports[p], _ = net.SplitHostPort(l.Addr().String())
		pairs = append(pairs, p, m.ports[p])
	}
	pairs = append(pairs, "/var/run/secrets/istio", dirs[0], "/var/run/adstap/capture", dirs[1])
	m.r = strings.NewReplacer(pairs...)
	return m
}

func (m *remap) of(s string) string { return m.r.Replace(s) }

// runningTap is the injected adstap container, running.
type runningTap struct {
	bin   string
	env   []string
	admin string // its admin address, as it logged it
	remap *remap
}

// startInjectedTap starts pod's adstap container and returns once it logged
// that it relays; the process is stopped with SIGTERM at cleanup. A port
// taken between choosing it and adstap binding it is chosen again.
func startInjectedTap(t *testing.T, pod *corev1.PodTemplateSpec) *runningTap {
	t.Helper()
	c := container(t, pod, "adstap")
	if len(c.Command) > 0 {
		t.Fatalf("adstap's container sets command %q: the image's entrypoint is /adstap", c.Command)
	}
	caDir, captureDir := t.TempDir(), t.TempDir()
	xdstest.WriteFiles(t, caDir, "root-cert.pem", xdstest.NewCA(t).CertPEM())
	bin := adstapbin.Build(t)
	for attempt := 1; ; attempt++ {
		rt := &runningTap{bin: bin, remap: newRemap(t, caDir, captureDir)}
		for _, e := range c.Env {
			// Variables from the downward API have no value here, and no
			// collector runs for OTEL_EXPORTER_OTLP_ENDPOINT to reach.
			if e.ValueFrom != nil || strings.HasPrefix(e.Name, "OTEL_") {
				continue
			}
			rt.env = append(rt.env, e.Name+"="+rt.remap.of(e.Value))
		}
		args := make([]string, len(c.Args))
		for i, a := range c.Args {
			args[i] = rt.remap.of(a)
		}
		p, err := adstapbin.Start(t, bin, args, rt.env)
		if err == nil {
			rt.admin = p.Admin
			return rt
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
	}
}

// probe runs one of the container's exec probes, as kubelet runs it.
func (rt *runningTap) probe(t *testing.T, p *corev1.Probe) (int, string) {
	t.Helper()
	if p == nil || p.Exec == nil || len(p.Exec.Command) == 0 || p.Exec.Command[0] != "/adstap" {
		t.Fatalf("want an exec probe of /adstap, got %+v", p)
	}
	args := make([]string, 0, len(p.Exec.Command)-1)
	for _, a := range p.Exec.Command[1:] {
		args = append(args, rt.remap.of(a))
	}
	cmd := exec.Command(rt.bin, args...)
	cmd.Env = rt.env
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestAdstapTemplateAdminStaysOnLoopback: started with the template's args
// and environment, adstap's probes pass through the exec probe, and nothing
// of it, admin or xDS listener, answers on the host's other addresses: other
// pods of the mesh cannot reach /debug/streams, which Envoy's policies
// would not cover (nothing of adstap goes through Envoy inbound).
func TestAdstapTemplateAdminStaysOnLoopback(t *testing.T) {
	leakcheck.Check(t)
	for _, native := range sidecarModes {
		t.Run(modeName(native), func(t *testing.T) {
			pod := injectAdstap(t, installs[0], native, nil)
			rt := startInjectedTap(t, pod)
			host, port, err := net.SplitHostPort(rt.admin)
			if err != nil {
				t.Fatal(err)
			}
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				t.Errorf("adstap's admin listens on %s, want a loopback address", rt.admin)
			}
			c := container(t, pod, "adstap")
			// Unknown flags stop adstap run (above); unknown variables would
			// be ignored, so they are checked against its help.
			help, err := exec.Command(rt.bin, "run", "--help").Output()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "ADSTAP_") && !strings.Contains(string(help), "(env "+e.Name) {
					t.Errorf("the template sets %s, which adstap run does not read", e.Name)
				}
			}
			// As a native sidecar started after istio-proxy, adstap's startup
			// probe also waits for Envoy's readiness (:15021), holding the
			// app until Envoy has its configuration; nothing answers there
			// yet, then a stand-in for Envoy's listener does.
			if native {
				if code, out := rt.probe(t, c.StartupProbe); code == 0 {
					t.Errorf("adstap's startup probe passes with Envoy not ready: %s", out)
				}
				lis, err := net.Listen("tcp", "127.0.0.1:"+rt.remap.ports["15021"])
				if err != nil {
					t.Fatal(err)
				}
				envoy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/healthz/ready" {
						io.WriteString(w, "LIVE\n")
					}
				})}
				go envoy.Serve(lis)
				defer envoy.Close()
			}
			for _, p := range probes(c) {
				if code, out := rt.probe(t, p.p); code != 0 {
					t.Errorf("adstap's %s probe %q exits %d: %s", p.kind, p.p.Exec.Command, code, out)
				}
			}
			// The capture, read in place as `kubectl exec … -c adstap --
			// /adstap inspect FILE` would, and listed for download.
			capture := rt.remap.of(flagValue(c, "capture"))
			inspect := exec.Command(rt.bin, "inspect", "--summary-only", capture)
			inspect.Env = rt.env
			if out, err := inspect.CombinedOutput(); err != nil || !strings.Contains(string(out), "captured by adstap") {
				t.Errorf("adstap inspect %s in place: %v\n%s", capture, err, out)
			}
			if list := get(t, "http://"+rt.admin+"/debug/capture"); !strings.Contains(string(list), `"name": "`+filepath.Base(capture)+`"`) {
				t.Errorf("GET /debug/capture does not list %s:\n%s", filepath.Base(capture), list)
			}
			if conn, err := net.DialTimeout("tcp", rt.admin, 5*time.Second); err != nil {
				t.Fatalf("the admin address does not answer on loopback: %v", err)
			} else {
				conn.Close()
			}
			others := adstapbin.HostAddresses(t)
			if len(others) == 0 {
				t.Log("this host has no address but loopback: the bound address above is the check")
			}
			for _, ip := range others {
				for _, p := range []string{port, rt.remap.ports["15100"], rt.remap.ports["15102"]} {
					addr := net.JoinHostPort(ip.String(), p)
					if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
						conn.Close()
						t.Errorf("%s answers: adstap listens beyond loopback", addr)
					}
				}
			}
			t.Logf("admin on %s; its port, the xDS listener's (%s) and the metrics listener's (%s) refused on %v", rt.admin, rt.remap.ports["15100"], rt.remap.ports["15102"], others)
		})
	}
}

// TestAdstapMetricsMergedByIstioAgent: istio-agent's status server (Istio's
// own code, pilot/cmd/pilot-agent/status), configured with the
// ISTIO_PROMETHEUS_ANNOTATIONS the injector gave istio-proxy, scrapes adstap
// on localhost and serves its metrics merged on the status port, the one
// the pod's prometheus.io annotations now name.
func TestAdstapMetricsMergedByIstioAgent(t *testing.T) {
	// The status server scrapes with its own http.Client, whose idle
	// connections outlive the test by design; this test's own are closed.
	leakcheck.Check(t, goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	for _, tc := range []struct {
		name string
		own  map[string]string
	}{
		{"adstap's metrics alone", nil},
		{"with the app's own metrics", map[string]string{"prometheus.io/port": "9080", "prometheus.io/path": "/stats"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := injectAdstap(t, installs[0], false, tc.own)
			if pod.Annotations["prometheus.io/port"] != "15020" || pod.Annotations["prometheus.io/path"] != "/stats/prometheus" {
				t.Errorf("the pod's prometheus.io annotations point at %s%s, want istio-agent's 15020/stats/prometheus",
					pod.Annotations["prometheus.io/port"], pod.Annotations["prometheus.io/path"])
			}
			scrape, ok := env(container(t, pod, "istio-proxy"), status.PrometheusScrapingConfig.Name)
			if !ok {
				t.Fatalf("istio-proxy has no %s: the injector did not merge adstap's metrics", status.PrometheusScrapingConfig.Name)
			}
			rt := startInjectedTap(t, pod)
			appBody := "# TYPE productpage_requests_total counter\nproductpage_requests_total 7\n"
			if tc.own != nil {
				// The app's metrics, on the app's port as moved for this test.
				lis, err := net.Listen("tcp", "127.0.0.1:"+rt.remap.ports["9080"])
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, appBody) })}
				go srv.Serve(lis)
				t.Cleanup(func() { srv.Close() })
			}
			t.Setenv(status.PrometheusScrapingConfig.Name, rt.remap.of(scrape))
			agentPort := startAgentStatus(t)

			own := string(get(t, "http://127.0.0.1:"+rt.remap.ports["15102"]+"/metrics")) // --metrics-listen, which the agent scrapes
			merged := string(get(t, "http://127.0.0.1:"+agentPort+"/stats/prometheus"))
			families := 0
			for line := range strings.SplitSeq(own, "\n") {
				if name, ok := strings.CutPrefix(line, "# TYPE adstap_"); ok {
					families++
					if !strings.Contains(merged, "# TYPE adstap_"+name) {
						t.Errorf("istio-agent's merged metrics lack adstap_%s", name)
					}
				}
			}
			if families == 0 {
				t.Fatalf("adstap's /metrics has no adstap_ family:\n%s", own)
			}
			if tc.own != nil && !strings.Contains(merged, "productpage_requests_total 7") {
				t.Errorf("istio-agent's merged metrics lost the app's own:\n%s", merged)
			}
			t.Logf("%d adstap metric families in istio-agent's /stats/prometheus (%s)", families, os.Getenv(status.PrometheusScrapingConfig.Name))
		})
	}
}

// startAgentStatus runs istio-agent's status server as pilot-agent does
// and returns its port. It listens on every address (":PORT"), where a port
// chosen free may be taken meanwhile: it then stops at once and another port
// is tried.
func startAgentStatus(t *testing.T) string {
	t.Helper()
	for attempt := 1; attempt <= 3; attempt++ {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		n, _ := strconv.Atoi(port)
		agent, err := status.NewServer(status.Options{NodeType: model.SidecarProxy, StatusPort: uint16(n), NoEnvoy: true, PodIP: "127.0.0.1"})
		if err != nil {
			t.Fatalf("istio-agent's status server refuses the injected configuration: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { agent.Run(ctx); close(done) }()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-done: // the port was taken
				cancel()
			default:
				conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
				if err != nil {
					// Run opens the port in the background; this waits
					// for it as kubelet waits for a probe to pass.
					time.Sleep(20 * time.Millisecond)
					continue
				}
				conn.Close()
				t.Cleanup(func() { cancel(); <-done })
				return port
			}
			break
		}
		cancel()
		<-done
	}
	t.Fatal("istio-agent's status server did not open its port in 3 tries")
	return ""
}

// get fetches url and fails the test unless it answers 200.
func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", url, resp.Status, err, b)
	}
	return b
}
