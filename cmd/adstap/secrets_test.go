package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/metadata"

	"github.com/adstap/adstap/internal/testutil/jaegertest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

func get(t *testing.T, url string) []byte {
	t.Helper()
	code, b := getCode(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, b)
	}
	return b
}

// getRetained gets a /debug/config page, and nil while the type is not yet
// retained (404): the config view takes a push from its own queue, a
// moment after the stream's state says it was accepted, and on a loaded
// machine after the next type's too.
func getRetained(t *testing.T, url string) []byte {
	t.Helper()
	code, b := getCode(t, url)
	switch code {
	case http.StatusOK:
		return b
	case http.StatusNotFound:
		return nil
	}
	t.Fatalf("GET %s: %d %s", url, code, b)
	return nil
}

func getCode(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// windows returns every n-byte window of secret, so a leak of any part of
// it is found, not just of the whole.
func windows(secret []byte, n int) [][]byte {
	var out [][]byte
	for i := 0; i+n <= len(secret); i += n / 2 {
		out = append(out, secret[i:i+n])
	}
	return out
}

// TestSecretsNeverLeaveTheTap pushes a real SDS secret with a private key,
// and a bearer token, through a tap with every output on, and looks for
// them in every output: live log, metrics, debug pages, the retained config
// view, the capture file and, when the Jaeger binary is there (always in
// CI, where the span tests need it), the spans in Jaeger. Without Jaeger
// every other output is still searched.
func TestSecretsNeverLeaveTheTap(t *testing.T) {
	leakcheck.Check(t)
	var j *jaegertest.Jaeger
	tracing := "--otlp-endpoint="
	if jaegertest.Available() {
		j = jaegertest.Start(t)
		tracing += "http://" + j.OTLPGRPC
	} else {
		t.Log("no Jaeger binary (make jaeger-bin): the spans are not searched, every other output is")
	}
	service := fmt.Sprintf("adstap-secrets-%d", time.Now().UnixNano())
	t.Setenv("OTEL_SERVICE_NAME", service)

	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "spiffe://cluster.local/ns/default/sa/reviews", []string{"reviews.default.svc"}, nil, false)
	key := kp.KeyPEM
	keyBody := bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimPrefix(bytes.TrimSpace(key), []byte("-----BEGIN PRIVATE KEY-----")), []byte("-----END PRIVATE KEY-----")))
	const token = "eyJhbGciOiJSUzI1NiIsImtpZCI6InNlY3JldC1rZXkifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDpyZXZpZXdzIn0.c2lnbmF0dXJl"

	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	capturePath := filepath.Join(t.TempDir(), "xds.capture")
	var log syncbuf.Buffer
	tapAddr, admin := startTracedTap(t, cp.Addr(), &log,
		tracing, "--capture="+capturePath, "--retain-resources", "--log-level=debug")
	const node = "sidecar~10.0.0.6~reviews-v1.default~default.svc.cluster.local"
	cp.SetSnapshot(t, node, "2026-11-30T09:02:00Z/1", map[resource.Type][]types.Resource{
		resource.ClusterType: xdsconfig.Clusters(2, 0),
		resource.SecretType:  {xdsconfig.Secret("default", kp.CertPEM, key)},
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, tapAddr))
	s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.SecretType, ResourceNames: []string{"default"}})
	r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
	if !bytes.Contains(r.Resources[0].Value, keyBody[:64]) {
		t.Fatal("the client did not receive the key: the relay must not redact what it relays")
	}
	s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{"default"}, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	r = xdstest.RecvWithin(t, 10*time.Second, s.Recv)
	s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})

	var streams []byte
	xdstest.Eventually(t, "both streams SYNCED", func() bool {
		streams = get(t, "http://"+admin+"/debug/streams")
		return bytes.Count(streams, []byte(`"state": "SYNCED"`)) == 2
	})
	var page struct {
		Streams []struct{ ID uint64 } `json:"streams"`
	}
	json.Unmarshal(streams, &page)
	// The state turns SYNCED a moment before the config view takes the push.
	var config []byte
	xdstest.Eventually(t, "the SDS push in /debug/config", func() bool {
		config = getRetained(t, fmt.Sprintf("http://%s/debug/config?stream=%d&type=sds", admin, page.Streams[0].ID))
		return bytes.Contains(config, []byte("tlsCertificate"))
	})
	if !bytes.Contains(config, []byte("[redacted by adstap: sha256")) {
		t.Errorf("/debug/config for SDS does not show the secret's fingerprint:\n%s", config)
	}
	var clusters []byte
	xdstest.Eventually(t, "the CDS push in /debug/config", func() bool {
		clusters = getRetained(t, fmt.Sprintf("http://%s/debug/config?stream=%d&type=cds", admin, page.Streams[0].ID))
		return bytes.Contains(clusters, []byte("svc-00001"))
	})
	// adstap status and adstap config, in every format.
	var commands []byte
	for _, args := range [][]string{
		{"status", "--admin", admin, "-o", "wide"}, {"status", "--admin", admin, "-o", "json"},
		{"config", "--admin", admin, "--node", node, "--type", "secret"},
		{"config", "--admin", admin, "--node", node, "--type", "secret", "-o", "json"},
	} {
		code, out, stderr := cli(t, args...)
		if code != exitOK {
			t.Errorf("adstap %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		commands = append(commands, out...)
	}
	if !bytes.Contains(commands, []byte("default  tlsCertificate  certificateChain, privateKey")) {
		t.Errorf("adstap config --type secret does not show the secret's kind and parts:\n%s", commands)
	}
	var spans, allSpans []byte
	if j != nil {
		traces := j.WaitTraces(t, service, map[string]string{"xds.type": "sds"}, func(ts []jaegertest.Trace) bool { return len(ts) > 0 })
		spans, _ = json.Marshal(traces)
		allSpans, _ = json.Marshal(j.Traces(t, service, nil))
	}
	s.CloseSend()
	cancel()

	// The capture is written from a queue of its own: wait for the pushes.
	var captured []byte
	xdstest.Eventually(t, "both pushes in the capture file", func() bool {
		var err error
		captured, err = os.ReadFile(capturePath)
		return err == nil && bytes.Count(captured, []byte(`"kind":"frame","stream":`)) >= 4
	})
	downloaded := get(t, "http://"+admin+"/debug/capture/"+filepath.Base(capturePath))
	// Read at different moments of a file still being written: one is the
	// start of the other.
	if !(bytes.HasPrefix(captured, downloaded) || bytes.HasPrefix(downloaded, captured)) || !bytes.Contains(downloaded, []byte(`"kind":"frame"`)) {
		t.Errorf("GET /debug/capture/%s is not the capture file as written:\n%s", filepath.Base(capturePath), downloaded)
	}
	outputs := map[string][]byte{
		"capture download": downloaded,
		"live log":         []byte(log.String()),
		"/metrics":         scrape(t, admin),
		"/debug/streams":   streams,
		"/debug/config":    append(config, clusters...),
		"status, config":   commands,
		"capture file":     captured,
		"spans":            append(spans, allSpans...),
	}
	// The capture holds messages raw; older ones (format 1) and some pages hold
	// them in base64: look for the secrets both ways.
	secrets := map[string][]byte{"bearer token": []byte(token)}
	for i, w := range windows(keyBody, 32) {
		secrets[fmt.Sprintf("private key bytes %d", i)] = w
	}
	for name, out := range outputs {
		for what, secret := range secrets {
			if bytes.Contains(out, secret) || strings.Contains(string(out), base64Of(secret)) {
				t.Errorf("%s leaks the %s", name, what)
			}
		}
	}
	if !bytes.Contains(captured, []byte("Bearer [redacted by adstap: sha256")) {
		t.Error("the capture does not keep the authorization header, redacted")
	}
}

// base64Of is how a byte string can appear inside a base64-encoded message:
// any of its three alignments, trimmed to whole base64 characters.
func base64Of(b []byte) string {
	s := base64Std.EncodeToString(b)
	if len(s) > 8 {
		return s[4 : len(s)-4]
	}
	return s
}

var base64Std = base64.StdEncoding
