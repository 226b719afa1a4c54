package deploy_test

import (
	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"io"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// listeners are the addresses an adstap container listens on, as its
// manifest configures them: the xDS listener, the admin address and, when
// set, the metrics listener.
type listeners struct {
	where                  string
	listen, admin, metrics string
}

// templateListeners reads the listener addresses of the injection template's
// adstap container: its $variables, its args and its ADSTAP_ variables, as
// the injector renders them (every one is a literal of the template).
func templateListeners(t *testing.T) listeners {
	t.Helper()
	text := string(readFile(t, "sidecar.yaml"))
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`\{\{-? \$(\w+) := "([^"]*)" \}\}`).FindAllStringSubmatch(text, -1) {
		vars[m[1]] = m[2]
	}
	expand := func(s string) string {
		return regexp.MustCompile(`\{\{ \$(\w+)(?: \| quote)? \}\}`).ReplaceAllStringFunc(s, func(ref string) string {
			name := regexp.MustCompile(`\$(\w+)`).FindStringSubmatch(ref)[1]
			v, ok := vars[name]
			if !ok {
				t.Fatalf("sidecar.yaml: %s refers to $%s, which is no literal of the template", ref, name)
			}
			return v
		})
	}
	l := listeners{where: "sidecar.yaml"}
	for _, m := range regexp.MustCompile(`(?m)^\s+- --(listen|admin|metrics-listen)=(.+)$`).FindAllStringSubmatch(text, -1) {
		switch m[1] {
		case "listen":
			l.listen = expand(m[2])
		case "admin":
			l.admin = expand(m[2])
		case "metrics-listen":
			l.metrics = expand(m[2])
		}
	}
	if m := regexp.MustCompile(`(?m)^\s+- name: ADSTAP_ADMIN\n\s+value: (.+)$`).FindStringSubmatch(text); m != nil {
		l.admin = expand(m[1])
	}
	if l.listen == "" || l.admin == "" {
		t.Fatalf("sidecar.yaml: no --listen or admin address found (%+v)", l)
	}
	return l
}

// anyPort keeps an address's host and lets the system choose its port.
func anyPort(t *testing.T, addr string) string {
	t.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	return net.JoinHostPort(host, "0")
}

// startListeners runs the real binary with the manifest's listener
// addresses (their hosts as written, the ports chosen free) and returns the
// addresses it logged.
func startListeners(t *testing.T, l listeners) listeners {
	t.Helper()
	args := []string{"run", "--listen=" + anyPort(t, l.listen), "--admin=" + anyPort(t, l.admin), "--upstream=127.0.0.1:1", "--log-format=json"}
	if l.metrics != "" {
		args = append(args, "--metrics-listen="+anyPort(t, l.metrics))
	}
	p, err := adstapbin.Start(t, adstapbin.Build(t), args, nil)
	if err != nil {
		t.Fatalf("%s: %v", l.where, err)
	}
	return listeners{where: l.where, listen: p.Listen, admin: p.Admin, metrics: p.Metrics}
}

// TestOnlyMetricsBeyondLoopback: in every manifest and the injection
// template, started as configured (the real binary, the container's
// listener addresses with free ports), nothing of adstap's HTTP answers from
// an address of this host other than loopback but /metrics: not the admin
// address, and on the metrics listener no page, capture or configuration.
// The xDS listener is where the manifest puts it (the debugging pod's is on
// the pod network, by design). Without an address beyond loopback the check
// is the bound addresses alone, and says so.
func TestOnlyMetricsBeyondLoopback(t *testing.T) {
	leakcheck.Check(t)
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	all := []listeners{templateListeners(t)}
	for _, tp := range taps(t) {
		all = append(all, listeners{where: tp.cfg.where, listen: tp.cfg.get("listen"), admin: tp.cfg.get("admin"), metrics: tp.cfg.get("metrics-listen")})
	}
	others := adstapbin.HostAddresses(t)
	for _, l := range all {
		t.Run(l.where, func(t *testing.T) {
			a := startListeners(t, l)
			adminHost, adminPort, _ := net.SplitHostPort(a.admin)
			if !loopback(adminHost) {
				t.Errorf("the admin address is %s, beyond loopback", a.admin)
			}
			// On loopback the admin address answers with everything: what
			// the check below must not reach.
			if code := httpGet(t, client, "http://"+a.admin+"/debug/streams"); code != http.StatusOK {
				t.Errorf("GET /debug/streams on loopback: %d, want 200", code)
			}
			var metricsPort string
			if a.metrics != "" {
				var host string
				host, metricsPort, _ = net.SplitHostPort(a.metrics)
				loop := net.JoinHostPort("127.0.0.1", metricsPort)
				if code := httpGet(t, client, "http://"+loop+"/metrics"); code != http.StatusOK {
					t.Errorf("GET /metrics on %s: %d, want 200", loop, code)
				}
				t.Logf("admin on %s; metrics on %s (host %q)", a.admin, a.metrics, host)
			}
			if len(others) == 0 {
				t.Logf("this host has no address beyond loopback: the admin address bound to %s is the check", a.admin)
				return
			}
			for _, ip := range others {
				addr := net.JoinHostPort(ip.String(), adminPort)
				if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
					conn.Close()
					t.Errorf("the admin port answers on %s", addr)
				}
				if metricsPort == "" {
					continue
				}
				base := "http://" + net.JoinHostPort(ip.String(), metricsPort)
				metricsHost, _, _ := net.SplitHostPort(a.metrics)
				if loopback(metricsHost) {
					if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip.String(), metricsPort), 5*time.Second); err == nil {
						conn.Close()
						t.Errorf("the metrics port, on loopback, answers on %s", ip)
					}
					t.Logf("from %s: the admin and metrics ports (both on loopback) refuse", ip)
					continue
				}
				if code := httpGet(t, client, base+"/metrics"); code != http.StatusOK {
					t.Errorf("GET %s/metrics: %d, want 200", base, code)
				}
				for _, path := range []string{"/", "/debug/streams", "/debug/pushes?stream=1", "/debug/config", "/debug/capture", "/healthz", "/ui/page.js"} {
					if code := httpGet(t, client, base+path); code != http.StatusNotFound {
						t.Errorf("GET %s%s: %d, want 404: only /metrics answers beyond loopback", base, path, code)
					}
				}
				t.Logf("from %s: /metrics answers, the admin port refuses, every other path is 404", ip)
			}
		})
	}
}

func httpGet(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}
