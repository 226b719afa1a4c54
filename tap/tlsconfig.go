package tap

import (
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
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// UpstreamTLSConfig builds the upstream TLS settings. An empty caFile trusts
// the system roots; serverName overrides the name checked in the upstream's
// certificate (istiod's is istiod.istio-system.svc); a client certificate is
// optional.
func UpstreamTLSConfig(caFile, serverName, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
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

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("reading CA bundle %s: no PEM certificate in it", file)
	}
	return pool, nil
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
