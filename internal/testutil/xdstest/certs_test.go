package xdstest_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
)

// TestMutualTLS proves issued leaves complete a real mTLS handshake against
// the CA pool, with the server verified by IP SAN as loopback tests dial it.
func TestMutualTLS(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	srv := ca.Issue(t, "istiod", []string{"istiod.istio-system.svc"}, []net.IP{net.IPv4(127, 0, 0, 1)}, false)
	cli := ca.Issue(t, "agent", nil, nil, true)

	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	server := tls.Server(c1, &tls.Config{
		Certificates: []tls.Certificate{srv.TLSCertificate()},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	})
	client := tls.Client(c2, &tls.Config{
		Certificates: []tls.Certificate{cli.TLSCertificate()},
		RootCAs:      ca.Pool(),
		ServerName:   "127.0.0.1",
	})
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	if got := server.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "agent" {
		t.Errorf("server saw client CN %q, want agent", got)
	}
	if _, err := srv.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "istiod.istio-system.svc"}); err != nil {
		t.Errorf("DNS SAN does not verify: %v", err)
	}
	if _, err := cli.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool()}); err == nil {
		t.Errorf("client-only cert verified for server auth")
	}
}

func TestWriteFiles(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	kp := ca.Issue(t, "x", []string{"x"}, nil, false)
	dir := t.TempDir()
	caPath := xdstest.WriteFiles(t, dir, "ca.pem", ca.CertPEM())
	certPath, keyPath := kp.WriteFiles(t, dir, "x")
	for path, want := range map[string][]byte{caPath: ca.CertPEM(), certPath: kp.CertPEM, keyPath: kp.KeyPEM} {
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: got %d bytes, err %v; want %d bytes", path, len(got), err, len(want))
		}
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
		}
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Errorf("written pair does not load: %v", err)
	}
}
