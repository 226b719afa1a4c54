package main

import (
	"crypto/tls"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// TestStatusShowsAFailingUpstream: when the tap cannot connect to its
// control plane, a proxy has no stream to show; status says the upstream
// fails, why in words and how many attempts failed, and exits 3. The
// upstreams are real: go-control-plane serving TLS with an expired
// certificate, one signed by another authority, one for another name, and a
// port nothing listens on; the client is grpc-go's xDS client, retrying as
// it does.
func TestStatusShowsAFailingUpstream(t *testing.T) {
	leakcheck.Check(t)
	const istiod = "istiod.istio-system.svc"
	ca := xdstest.NewCA(t)
	caFile := xdstest.WriteFiles(t, "", "root-cert.pem", ca.CertPEM())
	otherCA := xdstest.WriteFiles(t, "", "other-root.pem", xdstest.NewCA(t).CertPEM())
	tlsUpstream := func(kp *xdstest.KeyPair) string {
		creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{kp.TLSCertificate()}})
		return xdstest.StartControlPlane(t, xdstest.ListenTCP(t), grpc.Creds(creds)).Addr()
	}
	valid := ca.Issue(t, istiod, []string{istiod}, nil, false)
	// Held bound for the test: a port freed by closing a listener can be
	// taken by another process on a busy machine, or be the dial's own
	// source port.
	nothing := xdstest.RefusingAddr(t)

	for _, tc := range []struct {
		name, upstream string
		flags          []string
		reason, err    string
	}{
		{"certificate expired", tlsUpstream(ca.IssueExpired(t, istiod, []string{istiod}, nil)),
			[]string{"--upstream-ca=" + caFile, "--upstream-server-name=" + istiod}, upstream.ReasonCertificateExpired, "x509: certificate has expired"},
		{"unknown authority", tlsUpstream(valid),
			[]string{"--upstream-ca=" + otherCA, "--upstream-server-name=" + istiod}, upstream.ReasonUnknownAuthority, "x509: certificate signed by unknown authority"},
		{"wrong name", tlsUpstream(valid),
			[]string{"--upstream-ca=" + caFile, "--upstream-server-name=istiod.other.svc"}, upstream.ReasonWrongName, "x509: certificate is valid for " + istiod + ", not istiod.other.svc"},
		{"refused", nothing, nil, upstream.ReasonRefused, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log syncbuf.Buffer
			tapAddr, admin := startTracedTap(t, tc.upstream, &log, tc.flags...)
			code, out, _ := cli(t, "status", "--admin", admin)
			if code != exitOK || !strings.Contains(out, "No streams") || strings.Contains(out, "FAILING") {
				t.Errorf("before any client: exit %d, want 0 and no streams:\n%s", code, out)
			}
			cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tapAddr, "sidecar~10.0.0.9~productpage-v1-6b7f.shop~shop.svc.cluster.local")))
			cc.Connect()
			xdstest.Eventually(t, "two failed attempts", func() bool { return getStreams(t, admin, "").Upstream.FailedAttempts >= 2 })

			code, out, stderr := cli(t, "status", "--admin", admin)
			want := regexp.MustCompile(`(?m)^Problems:\n  upstream ` + regexp.QuoteMeta(tc.upstream) + ` FAILING: ` + regexp.QuoteMeta(upstream.ReasonWords(tc.reason)) +
				`; \d+ attempts failed since the last success\n    .*` + regexp.QuoteMeta(tc.err))
			if code != exitOutOfSync || !want.MatchString(out) {
				t.Errorf("status: exit %d (want %d), want a problem matching %s:\n%s%s", code, exitOutOfSync, want, out, stderr)
			}
			t.Logf("adstap status (exit %d):\n%s", code, out)

			code, out, _ = cli(t, "status", "--admin", admin, "-o", "json")
			var rep statusReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("-o json: %v\n%s", err, out)
			}
			if code != exitOutOfSync || rep.InSync || rep.Upstream == nil || rep.Upstream.State != upstream.Failing || rep.Upstream.Reason != tc.reason ||
				rep.Upstream.FailedAttempts < 2 || len(rep.Problems) == 0 || rep.Problems[0].Kind != problemUpstream {
				t.Errorf("-o json: exit %d:\n%s", code, out)
			}

			metrics := string(get(t, "http://"+admin+"/metrics"))
			if !strings.Contains(metrics, `adstap_upstream_failing{reason="`+tc.reason+`"} 1`) ||
				!regexp.MustCompile(`(?m)^adstap_upstream_failed_attempts [1-9]\d*$`).MatchString(metrics) {
				t.Errorf("/metrics lacks the failing upstream (%s):\n%s", tc.reason, grepLines(metrics, "adstap_upstream_"))
			}
		})
	}
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
