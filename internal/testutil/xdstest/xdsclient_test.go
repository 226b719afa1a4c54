package xdstest_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"go.uber.org/goleak"
)

const waitTime = 10 * time.Second

// hangTime bounds work whose length grows with the machine's load (tens of
// megabytes under the race detector): long enough that only a hang reaches it.
const hangTime = time.Minute

// TestXDSResolver proves grpc-go's real xDS client resolves xds:///svc
// through the go-control-plane peer (LDS→RDS→CDS→EDS over one ADS stream)
// and reaches the backend, over TCP, a Unix socket and mTLS (in-memory and
// file-based bootstrap credentials).
func TestXDSResolver(t *testing.T) {
	// The file-based credentials case meets grpc-go's leak (TLSChannelCreds).
	leakcheck.Check(t, goleak.IgnoreTopFunction(xdstest.PemfileWatcherFunc))
	ca := xdstest.NewCA(t)
	dir := t.TempDir()
	caFile := xdstest.WriteFiles(t, dir, "ca.pem", ca.CertPEM())
	clientCert, clientKey := ca.Issue(t, "grpc-client", nil, nil, true).WriteFiles(t, dir, "client")
	serverCert := ca.Issue(t, "istiod", nil, []net.IP{net.IPv4(127, 0, 0, 1)}, false).TLSCertificate()
	mtls := grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}))

	for _, tc := range []struct {
		name    string
		listen  func(testing.TB) net.Listener
		srvOpts []grpc.ServerOption
		creds   []xdstest.ChannelCreds
	}{
		{name: "tcp", listen: xdstest.ListenTCP},
		{name: "unix", listen: func(t testing.TB) net.Listener { l, _ := xdstest.ListenUnix(t); return l }},
		{
			name:    "mtls",
			listen:  xdstest.ListenTCP,
			srvOpts: []grpc.ServerOption{mtls},
			creds: []xdstest.ChannelCreds{xdstest.StaticTLSChannelCreds(t, &tls.Config{
				RootCAs:      ca.Pool(),
				Certificates: []tls.Certificate{ca.Issue(t, "grpc-client", nil, nil, true).TLSCertificate()},
			})},
		},
		{
			name:    "mtls-files",
			listen:  xdstest.ListenTCP,
			srvOpts: []grpc.ServerOption{mtls},
			creds:   []xdstest.ChannelCreds{xdstest.TLSChannelCreds(caFile, clientCert, clientKey)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := xdstest.StartControlPlane(t, tc.listen(t), tc.srvOpts...)
			backend := xdstest.StartBackend(t)
			cp.SetSnapshot(t, "node-1", "v1", xdsconfig.ResolverResources("svc", backend))

			cc := xdstest.DialRaw(t, "xds:///svc", grpc.WithResolvers(xdstest.XDSResolver(t, cp.Target(), "node-1", tc.creds...)))
			ctx, cancel := context.WithTimeout(t.Context(), waitTime)
			defer cancel()
			client := testgrpc.NewTestServiceClient(cc)
			if _, err := client.EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("EmptyCall: %v", err)
			}
			resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 3})
			if err != nil {
				t.Fatalf("UnaryCall: %v", err)
			}
			if resp.GetHostname() != backend || len(resp.GetPayload().GetBody()) != 3 {
				t.Errorf("UnaryCall answered by %q with %d bytes, want %q with 3", resp.GetHostname(), len(resp.GetPayload().GetBody()), backend)
			}

			// Every type must have been ACKed: same nonce back, no error.
			for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType} {
				req := cp.WaitForRequest(t, waitTime, func(r *discovery.DiscoveryRequest) bool {
					return r.GetTypeUrl() == typ && r.GetResponseNonce() != "" && !xdstest.IsNACK(r)
				})
				if req.GetVersionInfo() != "v1" {
					t.Errorf("%s ACK carries version %q, want v1", typ, req.GetVersionInfo())
				}
			}
			if n := cp.Requests()[0].GetNode().GetId(); n != "node-1" {
				t.Errorf("first request from node %q, want node-1", n)
			}
		})
	}
}

// TestXDSResolverMaglevNACK proves grpc-go NACKs a MAGLEV cluster and that
// the control plane's callbacks see the NACK with its error text.
func TestXDSResolverMaglevNACK(t *testing.T) {
	leakcheck.Check(t)
	var nacks atomic.Int32
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), xdstest.WithCallbacks(server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			if r.GetErrorDetail() != nil {
				nacks.Add(1)
			}
			return nil
		},
	}))
	backend := xdstest.StartBackend(t)
	cp.SetSnapshot(t, "node-1", "v1", xdsconfig.ResolverResourcesMaglev("svc", backend))

	cc := xdstest.DialRaw(t, "xds:///svc", grpc.WithResolvers(xdstest.XDSResolver(t, cp.Target(), "node-1")))
	cc.Connect() // resolution starts only once the channel leaves idle

	nack := cp.WaitForRequest(t, waitTime, func(r *discovery.DiscoveryRequest) bool {
		return r.GetTypeUrl() == resource.ClusterType && xdstest.IsNACK(r)
	})
	msg := nack.GetErrorDetail().GetMessage()
	t.Logf("grpc-go NACK (code %d, version %q): %s", nack.GetErrorDetail().GetCode(), nack.GetVersionInfo(), msg)
	const want = `error parsing "ClusterResource" response: resource "cluster-svc": unexpected lbPolicy MAGLEV in response: `
	if !strings.HasPrefix(msg, want) {
		t.Errorf("NACK message %q does not start with %q", msg, want)
	}
	if nack.GetVersionInfo() != "" {
		t.Errorf("NACK version %q, want empty: nothing was accepted before", nack.GetVersionInfo())
	}
	if nacks.Load() == 0 {
		t.Errorf("WithCallbacks hook did not see the NACK")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{}); err == nil {
		t.Errorf("EmptyCall succeeded through a NACKed cluster")
	}

	// A good snapshot ends go-control-plane's NACK loop and the channel
	// recovers without reconnecting.
	cp.SetSnapshot(t, "node-1", "v2", xdsconfig.ResolverResources("svc", backend))
	cp.WaitForRequest(t, waitTime, func(r *discovery.DiscoveryRequest) bool {
		return r.GetTypeUrl() == resource.ClusterType && r.GetVersionInfo() == "v2" && !xdstest.IsNACK(r)
	})
	ctx, cancel = context.WithTimeout(t.Context(), waitTime)
	defer cancel()
	if _, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{}, grpc.WaitForReady(true)); err != nil {
		t.Errorf("EmptyCall after the fix: %v", err)
	}
}
