package xdstest

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/xds"
	xdsbootstrap "google.golang.org/grpc/xds/bootstrap"

	"github.com/adstap/adstap/internal/xdsconfig"
)

// ChannelCreds is one entry of a grpc-go bootstrap server's channel_creds.
type ChannelCreds = xdsconfig.ChannelCreds

// TLSChannelCreds is grpc-go's own "tls" bootstrap credential: the xDS
// client dials the control plane over TLS with PEM files, e.g. from
// (*KeyPair).WriteFiles and WriteFiles. certFile and keyFile may be empty
// for server-only TLS.
//
// grpc-go v1.85.0 leaks one goroutine (PemfileWatcherFunc) per xDS client
// built with it: internal/xds/xdsclient/clientimpl.go builds the bundle a
// second time and drops its cancel func. Prefer StaticTLSChannelCreds; use
// this only to test the file-based path, with
// goleak.IgnoreTopFunction(xdstest.PemfileWatcherFunc).
func TLSChannelCreds(caFile, certFile, keyFile string) ChannelCreds {
	cfg := map[string]string{"ca_certificate_file": caFile}
	if certFile != "" {
		cfg["certificate_file"] = certFile
		cfg["private_key_file"] = keyFile
	}
	return ChannelCreds{Type: "tls", Config: cfg}
}

// PemfileWatcherFunc is the goroutine TLSChannelCreds leaks.
const PemfileWatcherFunc = "google.golang.org/grpc/credentials/tls/certprovider/pemfile.(*watcher).run"

// staticTLSType is a bootstrap channel-credential type registered with
// grpc-go so a test can hand its xDS client an in-memory tls.Config: no
// files, and no watcher goroutine to leak.
const staticTLSType = "adstap_xdstest_static_tls"

var (
	staticTLSConfigs sync.Map // id (string) -> *tls.Config
	staticTLSSeq     atomic.Uint64
)

func init() {
	// grpc-go's registry is not thread-safe and must be filled at init time.
	xdsbootstrap.RegisterChannelCredentials(staticTLSBuilder{})
}

// StaticTLSChannelCreds makes grpc-go's xDS client dial the control plane
// with cfg (e.g. RootCAs from (*CA).Pool and a client certificate from
// (*KeyPair).TLSCertificate). Without a ServerName, the server is verified
// against the host of serverURI ("localhost" for Unix sockets).
func StaticTLSChannelCreds(t testing.TB, cfg *tls.Config) ChannelCreds {
	id := strconv.FormatUint(staticTLSSeq.Add(1), 10)
	staticTLSConfigs.Store(id, cfg.Clone())
	t.Cleanup(func() { staticTLSConfigs.Delete(id) })
	return ChannelCreds{Type: staticTLSType, Config: map[string]string{"id": id}}
}

type staticTLSBuilder struct{}

func (staticTLSBuilder) Name() string { return staticTLSType }

func (staticTLSBuilder) Build(config json.RawMessage) (credentials.Bundle, func(), error) {
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, nil, fmt.Errorf("xdstest: static tls config %s: %v", config, err)
	}
	cfg, ok := staticTLSConfigs.Load(c.ID)
	if !ok {
		return nil, nil, fmt.Errorf("xdstest: static tls config %q is gone (test cleaned up?)", c.ID)
	}
	return staticTLSBundle{credentials.NewTLS(cfg.(*tls.Config).Clone())}, func() {}, nil
}

type staticTLSBundle struct {
	tc credentials.TransportCredentials
}

func (b staticTLSBundle) TransportCredentials() credentials.TransportCredentials { return b.tc }
func (staticTLSBundle) PerRPCCredentials() credentials.PerRPCCredentials         { return nil }
func (b staticTLSBundle) NewWithMode(string) (credentials.Bundle, error)         { return b, nil }

// BootstrapJSON returns a grpc-go xDS bootstrap naming one xDS server,
// serverURI (host:port or unix:///path), and node nodeID. With no creds the
// channel is insecure.
func BootstrapJSON(serverURI, nodeID string, creds ...ChannelCreds) []byte {
	b, err := xdsconfig.BootstrapJSON(serverURI, nodeID, "adstap-test", creds...)
	if err != nil {
		panic("xdstest: " + err.Error())
	}
	return b
}

// XDSResolver returns a resolver for xds:/// targets backed by its own xDS
// client talking to serverURI as nodeID; pass it to grpc.NewClient with
// grpc.WithResolvers. Each ClientConn built with it gets a fresh xDS client
// (and ADS stream), released when that ClientConn is closed, so tests must
// close their ClientConns (DialRaw does) or goroutines leak.
func XDSResolver(t testing.TB, serverURI, nodeID string, creds ...ChannelCreds) resolver.Builder {
	t.Helper()
	b, err := xds.NewXDSResolverWithConfigForTesting(BootstrapJSON(serverURI, nodeID, creds...))
	if err != nil {
		t.Fatalf("xdstest: xds resolver: %v", err)
	}
	return b
}
