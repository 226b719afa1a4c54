package tap

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ListenTLSConfig builds the downstream TLS settings from PEM files. With a
// client CA, clients must present a certificate it signed (mTLS).
func ListenTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("listener TLS needs both a certificate and a key")
	}
	kp, err := newKeyPairFile(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.get()
		},
		NextProtos: []string{"h2"},
	}
	if clientCAFile != "" {
		cas, err := newCAFile(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs, _ = cas.get()
		base := cfg.Clone()
		// Each handshake verifies clients against the bundle as it is now.
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool, err := cas.get()
			if err != nil {
				return nil, err
			}
			c := base.Clone()
			c.ClientCAs = pool
			return c, nil
		}
	}
	return cfg, nil
}

// UpstreamTLSConfig builds the upstream TLS settings. An empty caFile trusts
// the system roots; serverName overrides the name checked in the upstream's
// certificate (istiod's is istiod.istio-system.svc); a client certificate is
// optional. The CA bundle is read again when its file changes, so a rotated
// mesh root applies to the next upstream connection (connections already
// open keep the handshake they made).
func UpstreamTLSConfig(caFile, serverName, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		roots, err := newCAFile(caFile)
		if err != nil {
			return nil, err
		}
		// tls.Config has no hook for a client's roots, so crypto/tls's own
		// chain and name check is switched off and done here instead, as
		// crypto/tls does it, against the bundle as it is now.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return roots.verifyServer(cs, serverName)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("an upstream client certificate needs both a certificate and a key")
	}
	if certFile != "" {
		kp, err := newKeyPairFile(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return kp.get()
		}
	}
	return cfg, nil
}

// caFile serves a CA bundle from a file and reads it again when its content
// changes: a mesh root rotates (istiod writes the new bundle into the
// istio-ca-root-cert ConfigMap and kubelet swaps the mounted file), and
// istio-agent, which adstap stands in for towards istiod, follows it too.
// The file is read at each handshake, which are rare (one per connection)
// and need no clock: a modification time can repeat within a tick.
type caFile struct {
	file string

	mu   sync.Mutex
	pool *x509.CertPool
	pem  []byte
}

func newCAFile(file string) (*caFile, error) {
	c := &caFile{file: file}
	if _, err := c.get(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *caFile) get() (*x509.CertPool, error) {
	data, err := os.ReadFile(c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && c.pool != nil:
		// Mid-swap: keep the last good bundle.
		return c.pool, nil
	case err != nil:
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	case c.pool != nil && bytes.Equal(data, c.pem):
		return c.pool, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		if c.pool != nil {
			// A rotation caught half-written: keep the last good bundle.
			return c.pool, nil
		}
		return nil, fmt.Errorf("reading CA bundle %s: no PEM certificate in it", c.file)
	}
	c.pool, c.pem = pool, data
	return pool, nil
}

// verifyServer checks the upstream's chain and name against the bundle as
// crypto/tls would with RootCAs set: the name is the one sent as SNI, else
// the configured server name (an IP address is never sent as SNI).
func (c *caFile) verifyServer(cs tls.ConnectionState, serverName string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the upstream sent no certificate")
	}
	pool, err := c.get()
	if err != nil {
		return err
	}
	name := cs.ServerName
	if name == "" {
		name = serverName
	}
	if name == "" {
		return errors.New("tls: no server name to check the upstream's certificate against (set --upstream-server-name)")
	}
	opts := x509.VerifyOptions{Roots: pool, DNSName: name, Intermediates: x509.NewCertPool()}
	for _, cert := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(cert)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("tls: failed to verify certificate: %w", err)
	}
	return nil
}

// keyPairFile serves a certificate from files and reloads it when either file
// changes, since mesh certificates rotate (Istio's every 24 hours) and a tap
// runs for weeks.
type keyPairFile struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	modTimes [2]time.Time
}

func newKeyPairFile(certFile, keyFile string) (*keyPairFile, error) {
	kp := &keyPairFile{certFile: certFile, keyFile: keyFile}
	if _, err := kp.get(); err != nil {
		return nil, err
	}
	return kp, nil
}

func (kp *keyPairFile) get() (*tls.Certificate, error) {
	var mod [2]time.Time
	for i, f := range []string{kp.certFile, kp.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("loading certificate: %w", err)
		}
		mod[i] = fi.ModTime()
	}
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if kp.cert != nil && mod == kp.modTimes {
		return kp.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		if kp.cert != nil {
			// A rotation caught half-written: keep serving the last good pair.
			return kp.cert, nil
		}
		return nil, fmt.Errorf("loading certificate %s and key %s: %w", kp.certFile, kp.keyFile, err)
	}
	kp.cert, kp.modTimes = &cert, mod
	return kp.cert, nil
}
