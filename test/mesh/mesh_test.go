package mesh_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/adstap/adstap/internal/testutil/adstapbin"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promtest"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// tapProcess is an `adstap run` of the built binary.
type tapProcess struct {
	listen, admin, metrics string // as it logged them
	log                    *syncbuf.Buffer
}

// startTap runs `adstap run` in front of upstream, with its metrics on a
// listener of their own, and returns once it logged its addresses. It is
// stopped with SIGTERM at cleanup.
func startTap(t *testing.T, bin, upstream string, flags ...string) *tapProcess {
	t.Helper()
	args := append([]string{"run", "--listen=127.0.0.1:0", "--admin=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
		"--upstream=" + upstream, "--log-format=json", "--drain-timeout=2s"}, flags...)
	p, err := adstapbin.Start(t, bin, args, append(os.Environ(), "OTEL_BSP_SCHEDULE_DELAY=200"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("adstap %s:\n%s", strings.Join(args, " "), p.Log.String())
		}
	})
	return &tapProcess{listen: p.Listen, admin: p.Admin, metrics: p.Metrics, log: p.Log}
}

// status runs `adstap status` of the built binary.
func status(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"status"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// meshReport is the part of status -o json this suite reads.
type meshReport struct {
	Proxies []struct {
		Name     string `json:"name"`
		Tap      string `json:"tap"`
		Streams  int    `json:"streams"`
		Version  string `json:"version"`
		Upstream *struct {
			State          string `json:"state"`
			Reason         string `json:"reason"`
			FailedAttempts int    `json:"failed_attempts"`
		} `json:"upstream"`
		Types map[string]struct {
			State   string `json:"state"`
			TraceID string `json:"trace_id"`
		} `json:"types"`
	} `json:"proxies"`
	Problems []struct {
		Kind  string `json:"kind"`
		Proxy string `json:"proxy"`
	} `json:"problems"`
	InSync bool `json:"in_sync"`
}

// TestStatusPrometheusAcrossTaps: twelve `adstap run` processes, each in
// front of its own go-control-plane with its own grpc-go xDS client, as
// twelve sidecars would be; two of the clients NACK their clusters, and one
// tap's control plane serves an expired certificate. A real Prometheus
// scrapes each tap's --metrics-listen, labelled with its pod and namespace
// as Kubernetes service discovery's relabelling would. `adstap status
// --prometheus` lists all twelve with the right states, problems first, and
// exits 3; each ERROR carries the trace id of its NACK's exemplar, a trace
// the real Jaeger the taps send spans to has.
func TestStatusPrometheusAcrossTaps(t *testing.T) {
	leakcheck.Check(t)
	bin := adstapbin.Build(t)
	promtest.Binary(t) // skipped without Prometheus before anything starts
	jaeger := jaegertest.Start(t)

	const (
		namespace = "shop"
		version   = "2026-12-01T09:00:00Z/7"
		istiod    = "istiod.istio-system.svc"
	)
	nacking := map[int]bool{3: true, 7: true}
	const expired = 10
	ca := xdstest.NewCA(t)
	caFile := xdstest.WriteFiles(t, "", "root-cert.pem", ca.CertPEM())
	backend := xdstest.StartBackend(t)
	var targets []promtest.Target
	for i := range 12 {
		pod := fmt.Sprintf("reviews-v%d-%02d", i%3+1, i)
		node := fmt.Sprintf("sidecar~10.0.0.%d~%s.%s~%s.svc.cluster.local", i+10, pod, namespace, namespace)
		var opts []grpc.ServerOption
		flags := []string{"--otlp-endpoint=http://" + jaeger.OTLPGRPC}
		if i == expired {
			kp := ca.IssueExpired(t, istiod, []string{istiod}, nil)
			opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp.TLSCertificate()}})))
			flags = append(flags, "--upstream-ca="+caFile, "--upstream-server-name="+istiod)
		}
		cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), opts...)
		resources := xdsconfig.ResolverResources("greeter", backend)
		if nacking[i] {
			resources = xdsconfig.ResolverResourcesMaglev("greeter", backend)
		}
		cp.SetSnapshot(t, node, version, resources)
		tp := startTap(t, bin, cp.Addr(), flags...)
		cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tp.listen, node)))
		cc.Connect()
		targets = append(targets, promtest.Target{Addr: tp.metrics, Labels: map[string]string{"pod": pod, "namespace": namespace}})
	}
	server := promtest.Start(t, time.Second, targets...)

	var rep meshReport
	var last string
	xdstest.EventuallyWithin(t, 90*time.Second, "status --prometheus shows 12 proxies: 9 synced, 2 NACKing, 1 upstream failing", func() bool {
		_, out, _ := status(t, bin, "--prometheus", server.URL, "-o", "json")
		last = out
		rep = meshReport{}
		if json.Unmarshal([]byte(out), &rep) != nil || len(rep.Proxies) != 12 {
			return false
		}
		synced, errs, failing := 0, 0, 0
		for _, p := range rep.Proxies {
			switch {
			case p.Types["cds"].State == "ERROR" && p.Types["cds"].TraceID != "":
				errs++
			case p.Upstream != nil && p.Upstream.Reason == "certificate_expired":
				failing++
			case p.Types["cds"].State == "SYNCED" && p.Types["lds"].State == "SYNCED" && p.Types["rds"].State == "SYNCED" && p.Types["eds"].State == "SYNCED":
				synced++
			}
		}
		return synced == 9 && errs == 2 && failing == 1
	})
	if t.Failed() {
		t.Fatalf("last status -o json:\n%s", last)
	}

	code, out, stderr := status(t, bin, "--prometheus", server.URL)
	t.Logf("adstap status --prometheus %s (exit %d):\n%s", server.URL, code, out)
	if code != 3 || stderr != "" {
		t.Errorf("exit %d, want 3 (two proxies in ERROR, an upstream failing); stderr %q", code, stderr)
	}
	lines := strings.Split(out, "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^NAME\s+CDS\s+LDS\s+EDS\s+RDS\s+CONTROL PLANE\s+VERSION$`),
		regexp.MustCompile(`^reviews-v1-03\.shop\s+ERROR \(\d+m?s\)\s+SYNCED \(\d+m?s\)\s+-\s+SYNCED \(\d+m?s\)\s+-\s+gRPC Go/\S+$`),
		regexp.MustCompile(`^reviews-v2-07\.shop\s+ERROR \(\d+m?s\)\s+SYNCED \(\d+m?s\)\s+-\s+SYNCED \(\d+m?s\)\s+-\s+gRPC Go/\S+$`),
		regexp.MustCompile(`^reviews-v2-10\.shop\s+-\s+-\s+-\s+-\s+UPSTREAM FAILING\s+-$`),
	}
	for i, re := range want {
		if i >= len(lines) || !re.MatchString(lines[i]) {
			t.Errorf("line %d does not match %s:\n%s", i+1, re, out)
		}
	}
	synced := regexp.MustCompile(`(?m)^reviews-v\d-\d\d\.shop(\s+SYNCED \(\d+m?s\)){4}\s+-\s+gRPC Go/\S+$`)
	if n := len(synced.FindAllString(out, -1)); n != 9 {
		t.Errorf("%d SYNCED rows, want 9:\n%s", n, out)
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Problems:\n  reviews-v2-10\.shop: upstream FAILING: the control plane's certificate has expired \(or is not valid yet\); \d+ attempts? failed since the last success$`),
		regexp.MustCompile(`(?m)^  reviews-v1-03\.shop cds: NACKED \d+m?s ago; trace [0-9a-f]{32}$`),
	} {
		if !re.MatchString(out) {
			t.Errorf("no line matching %s:\n%s", re, out)
		}
	}
	// Each ERROR's trace id is a trace of the NACK in Jaeger: the seam a
	// reader of spans takes the NACK's message and Istio object from.
	for _, p := range rep.Proxies {
		if id := p.Types["cds"].TraceID; id != "" {
			if tr := jaeger.Trace(t, id); len(tr.Spans) == 0 {
				t.Errorf("%s: trace %s of its NACK is not in Jaeger", p.Name, id)
			}
		}
	}

	// --node: one proxy, by its node id or its pod.namespace.
	if code, out, _ := status(t, bin, "--prometheus", server.URL, "--node", "sidecar~10.0.0.11~reviews-v2-01.shop~shop.svc.cluster.local"); code != 0 ||
		!regexp.MustCompile(`^NAME.*\nreviews-v2-01\.shop\s+SYNCED[^\n]*\n$`).MatchString(out) {
		t.Errorf("--node of a synced proxy: exit %d, want 0 and its row alone:\n%s", code, out)
	}
	if code, out, _ := status(t, bin, "--prometheus", server.URL, "--node", "reviews-v2-07.shop", "-o", "wide"); code != 3 ||
		!regexp.MustCompile(`(?m)^NAME\s+TAP\s+STREAMS\s+CDS.*\nreviews-v2-07\.shop\s+127\.0\.0\.1:\d+\s+1\s+ERROR`).MatchString(out) {
		t.Errorf("--node of a NACKing proxy, -o wide: exit %d, want 3 and its row with its tap and streams:\n%s", code, out)
	}
	if code, _, stderr := status(t, bin, "--prometheus", server.URL, "--node", "nobody"); code != 1 ||
		!regexp.MustCompile(`^adstap status: no proxy "nobody" among the 12 that Prometheus at \S+ shows \(reviews-v1-00\.shop, .* and 7 more\)\n$`).MatchString(stderr) {
		t.Errorf("--node nobody: exit %d, stderr %q", code, stderr)
	}
}

// TestStatusPrometheusBadInput: what is asked that cannot be answered gets
// one line naming it and what exists, never a table that looks healthy.
func TestStatusPrometheusBadInput(t *testing.T) {
	leakcheck.Check(t)
	bin := adstapbin.Build(t)
	empty := promtest.Start(t, time.Second) // scrapes nothing
	lis := xdstest.ListenTCP(t)
	nothing := "http://" + lis.Addr().String()
	lis.Close()
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"not a URL", []string{"--prometheus", "prometheus:9090"}, 2, `^adstap status: --prometheus "prometheus:9090": want Prometheus's URL, http://host:port\n$`},
		{"nothing listening", []string{"--prometheus", nothing}, 1, `^adstap status: asking Prometheus at ` + regexp.QuoteMeta(nothing) + `: .*connection refused\n$`},
		{"no taps scraped", []string{"--prometheus", empty.URL}, 1, `^adstap status: Prometheus at ` + regexp.QuoteMeta(empty.URL) + ` has no adstap_stream_states series: is it scraping the taps \(adstap run --metrics-listen, or Istio's metrics merging\)\? It scrapes nothing\.\n$`},
		{"bad output", []string{"--prometheus", empty.URL, "-o", "yaml"}, 2, `-o "yaml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := status(t, bin, tc.args...)
			if code != tc.code || !regexp.MustCompile(tc.want).MatchString(stderr) || out != "" {
				t.Errorf("exit %d (want %d), stderr %q (want %s), stdout %q", code, tc.code, stderr, tc.want, out)
			}
		})
	}
}
