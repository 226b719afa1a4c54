package tap_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/tap"
)

// TestUpstreamCARotationUnderALiveStream: the mesh root rotates while a
// stream is open. The open stream keeps receiving pushes over the
// connection it has; a new connection is checked against the bundle as the
// file now says: refused while the file still holds the old root only,
// accepted once the new root is written, as kubelet does, by swapping the
// file.
func TestUpstreamCARotationUnderALiveStream(t *testing.T) {
	leakcheck.Check(t)
	const istiod = "istiod.istio-system.svc"
	oldRoot, newRoot := xdstest.NewCA(t), xdstest.NewCA(t)
	var serving atomic.Pointer[tls.Certificate]
	oldCert := oldRoot.Issue(t, "istiod", []string{istiod}, nil, false).TLSCertificate()
	newCert := newRoot.Issue(t, "istiod", []string{istiod}, nil, false).TLSCertificate()
	serving.Store(&oldCert)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), grpc.Creds(credentials.NewTLS(&tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return serving.Load(), nil },
	})))

	dir := t.TempDir()
	caFile := filepath.Join(dir, "root-cert.pem")
	writeSwapped(t, caFile, oldRoot.CertPEM())
	upstreamTLS, err := tap.UpstreamTLSConfig(caFile, istiod, "", "")
	if err != nil {
		t.Fatal(err)
	}
	_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}, UpstreamTLS: upstreamTLS}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	push := func(version string) {
		cp.SetSnapshot(t, "sidecar", version, map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1, 0)})
	}
	subscribe := func(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient) error {
		return s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "sidecar"}, TypeUrl: resource.ClusterType})
	}
	recvVersion := func(s discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient) string {
		t.Helper()
		r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
		if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}); err != nil {
			t.Fatalf("ACK: %v", err)
		}
		return r.VersionInfo
	}

	push("1")
	live := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, addr.Addr))
	if err := subscribe(live); err != nil {
		t.Fatal(err)
	}
	if v := recvVersion(live); v != "1" {
		t.Fatalf("first push: version %q, want 1", v)
	}

	// istiod now serves a certificate of the new root; the file still holds
	// the old one.
	serving.Store(&newCert)
	stale := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, addr.Addr))
	err = subscribe(stale)
	if err == nil || errors.Is(err, io.EOF) {
		// Send says io.EOF when the tap ended the stream first (a loaded
		// machine); the stream's status is what Recv returns.
		_, err = stale.Recv()
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a new connection before the root file changed: %v, want Unavailable (istiod's certificate is not from the old root)", err)
	}

	writeSwapped(t, caFile, newRoot.CertPEM())
	push("2")
	if v := recvVersion(live); v != "2" {
		t.Fatalf("the stream open across the rotation got version %q, want 2", v)
	}
	fresh := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, addr.Addr))
	if err := subscribe(fresh); err != nil {
		t.Fatal(err)
	}
	if v := recvVersion(fresh); v != "2" {
		t.Fatalf("a new connection after the rotation got version %q, want 2", v)
	}
}

// writeSwapped replaces a file the way kubelet updates a mounted ConfigMap:
// the new content is written aside and renamed over the old.
func writeSwapped(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestListenClientCARotation: the client CA bundle is read again when its
// file changes: clients of the new root are let in, those of the old one no
// longer, and a stream opened before stays open.
func TestListenClientCARotation(t *testing.T) {
	leakcheck.Check(t)
	oldRoot, newRoot := xdstest.NewCA(t), xdstest.NewCA(t)
	dir := t.TempDir()
	server := oldRoot.Issue(t, "adstap", []string{"adstap.local"}, nil, false)
	certFile, keyFile := server.WriteFiles(t, dir, "tap")
	caFile := filepath.Join(dir, "clients.pem")
	writeSwapped(t, caFile, oldRoot.CertPEM())
	listenTLS, err := tap.ListenTLSConfig(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	cp.SetSnapshot(t, "sidecar", "1", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1, 0)})
	_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}, ListenTLS: listenTLS}, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(client *xdstest.KeyPair) (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, error) {
		cc := xdstest.DialRaw(t, addr.Addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			RootCAs: oldRoot.Pool(), ServerName: "adstap.local", Certificates: []tls.Certificate{client.TLSCertificate()},
		})))
		s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "sidecar"}, TypeUrl: resource.ClusterType}); err != nil {
			return s, err
		}
		r, err := s.Recv()
		if err != nil {
			return s, err
		}
		return s, s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	}
	oldClient, newClient := oldRoot.Issue(t, "envoy", nil, nil, true), newRoot.Issue(t, "envoy", nil, nil, true)
	live, err := open(oldClient)
	if err != nil {
		t.Fatalf("a client of the root in the file: %v", err)
	}
	if _, err := open(newClient); status.Code(err) != codes.Unavailable {
		t.Fatalf("a client of a root not yet in the file: %v, want Unavailable", err)
	}
	writeSwapped(t, caFile, newRoot.CertPEM())
	if _, err := open(newClient); err != nil {
		t.Fatalf("a client of the new root after the swap: %v", err)
	}
	if _, err := open(oldClient); status.Code(err) != codes.Unavailable {
		t.Fatalf("a client of the old root after the swap: %v, want Unavailable", err)
	}
	cp.SetSnapshot(t, "sidecar", "2", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1, 0)})
	if r := xdstest.RecvWithin(t, 10*time.Second, live.Recv); r.VersionInfo != "2" {
		t.Fatalf("the stream opened before the swap got version %q, want 2", r.VersionInfo)
	}
}

// TestUpstreamVerifiedByIPAddress: an upstream dialed by IP address is
// checked against the certificate's IP SANs, though an IP is never sent as
// SNI: the configured server name (adstap run passes the upstream's host)
// is what the certificate must match.
func TestUpstreamVerifiedByIPAddress(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	byIP := ca.Issue(t, "istiod", nil, []net.IP{net.ParseIP("127.0.0.1")}, false).TLSCertificate()
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{byIP}})))
	cp.SetSnapshot(t, "sidecar", "1", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1, 0)})
	caFile := filepath.Join(t.TempDir(), "root-cert.pem")
	writeSwapped(t, caFile, ca.CertPEM())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		serverName string
		wantOK     bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.2", false},
	} {
		upstreamTLS, err := tap.UpstreamTLSConfig(caFile, tc.serverName, "", "")
		if err != nil {
			t.Fatal(err)
		}
		_, addr := startTap(t, tap.Config{Upstream: tap.Address{Network: "tcp", Addr: cp.Addr()}, UpstreamTLS: upstreamTLS}, nil)
		s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, addr.Addr))
		err = s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: "sidecar"}, TypeUrl: resource.ClusterType})
		if err == nil {
			_, err = s.Recv()
		}
		if (err == nil) != tc.wantOK {
			t.Errorf("server name %s, certificate for 127.0.0.1: %v, want ok=%v", tc.serverName, err, tc.wantOK)
		}
	}
}
