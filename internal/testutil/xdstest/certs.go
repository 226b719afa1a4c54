package xdstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// certLifetime is short so a leaked test cert is useless, yet long enough
// for any test run. Certs are backdated by certBackdate to tolerate clock
// skew between the process that issues and the peer that verifies (Envoy in
// a container, for example).
const (
	certLifetime = 2 * time.Hour
	certBackdate = 5 * time.Minute
)

// CA is an in-memory ECDSA P-256 certificate authority.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// KeyPair is a leaf certificate issued by a CA.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
	Cert    *x509.Certificate
	tlsCert tls.Certificate
}

// NewCA creates a self-signed root.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("xdstest: CA key: %v", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "adstap test CA", Organization: []string{"adstap"}},
		NotBefore:             now.Add(-certBackdate),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("xdstest: CA cert: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("xdstest: parse CA cert: %v", err)
	}
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}
}

// Issue signs a leaf for a server (ServerAuth) or, with isClient, a client
// (ClientAuth). The SANs are what peers verify, so pass every name and IP the
// leaf will be reached by (e.g. 127.0.0.1 and "istiod.istio-system.svc").
func (ca *CA) Issue(t testing.TB, commonName string, dnsNames []string, ips []net.IP, isClient bool) *KeyPair {
	t.Helper()
	now := time.Now()
	return ca.issue(t, commonName, dnsNames, ips, isClient, now.Add(-certBackdate), now.Add(certLifetime))
}

// IssueExpired signs a server leaf that expired an hour ago, as istiod's
// serving certificate is when its rotation failed: every handshake that
// checks it fails with "x509: certificate has expired".
func (ca *CA) IssueExpired(t testing.TB, commonName string, dnsNames []string, ips []net.IP) *KeyPair {
	t.Helper()
	now := time.Now()
	return ca.issue(t, commonName, dnsNames, ips, false, now.Add(-certLifetime), now.Add(-time.Hour))
}

func (ca *CA) issue(t testing.TB, commonName string, dnsNames []string, ips []net.IP, isClient bool, notBefore, notAfter time.Time) *KeyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("xdstest: leaf key: %v", err)
	}
	usage := x509.ExtKeyUsageServerAuth
	if isClient {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"adstap"}},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("xdstest: leaf cert %q: %v", commonName, err)
	}
	// PKCS#8 because Envoy, grpc-go's pemfile provider and crypto/tls all
	// accept it, whereas SEC1 ("EC PRIVATE KEY") trips up some tooling.
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("xdstest: marshal leaf key: %v", err)
	}
	kp := &KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	if kp.Cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("xdstest: parse leaf cert: %v", err)
	}
	if kp.tlsCert, err = tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
		t.Fatalf("xdstest: leaf key pair: %v", err)
	}
	return kp
}

// CertPEM returns the root certificate in PEM form.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Pool returns a fresh pool holding only this root, so tests never trust
// the system roots by accident.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// TLSCertificate returns the pair for tls.Config.Certificates. It is parsed
// at issue time so this cannot fail.
func (kp *KeyPair) TLSCertificate() tls.Certificate { return kp.tlsCert }

// WriteFiles writes the certificate and key as <name>.crt and <name>.key in
// dir (t.TempDir() when dir is ""), for peers that read PEM from disk.
func (kp *KeyPair) WriteFiles(t testing.TB, dir, name string) (certPath, keyPath string) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	return WriteFiles(t, dir, name+".crt", kp.CertPEM), WriteFiles(t, dir, name+".key", kp.KeyPEM)
}

// WriteFiles writes pemBytes to dir/name (t.TempDir() when dir is "") with
// owner-only permissions, since it may hold a private key, and returns the
// path.
func WriteFiles(t testing.TB, dir, name string, pemBytes []byte) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		t.Fatalf("xdstest: write %s: %v", path, err)
	}
	return path
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatalf("xdstest: serial: %v", err)
	}
	return n
}
