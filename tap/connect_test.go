package tap_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// connects records the upstream connects a tap reports.
type connects struct {
	mu  sync.Mutex
	got []codec.UpstreamConnect
}

func (c *connects) observer() tap.Observer {
	return tap.ObserverFuncs{UpstreamConnectFunc: func(u codec.UpstreamConnect) {
		c.mu.Lock()
		c.got = append(c.got, u)
		c.mu.Unlock()
	}}
}

func (c *connects) wait(t *testing.T) codec.UpstreamConnect {
	t.Helper()
	var u codec.UpstreamConnect
	xdstest.Eventually(t, "an upstream connect reported", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.got) > 0 {
			u = c.got[0]
		}
		return len(c.got) > 0
	})
	return u
}

func TestUpstreamConnectPhasesAreTimed(t *testing.T) {
	leakcheck.Check(t)
	ca := xdstest.NewCA(t)
	dir := t.TempDir()
	caFile := xdstest.WriteFiles(t, dir, "ca.pem", ca.CertPEM())
	istiod := ca.Issue(t, "istiod", []string{"istiod.istio-system.svc"}, nil, false)
	lis := xdstest.ListenTCP(t)
	xdstest.ServeRawUpstream(t, lis, echoReversed(&digestLog{}), grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{istiod.TLSCertificate()},
	})))
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	byName := tap.Address{Network: "tcp", Addr: net.JoinHostPort("localhost", port)}

	tests := []struct {
		name       string
		upstream   tap.Address
		serverName string
		wantFailed string
		wantDNS    bool
		wantTLS    bool
	}{
		{name: "by name over TLS", upstream: byName, serverName: "istiod.istio-system.svc", wantDNS: true, wantTLS: true},
		{name: "wrong server name", upstream: byName, serverName: "not-istiod", wantFailed: "tls", wantDNS: true, wantTLS: true},
		{name: "nothing listening", upstream: tap.Address{Network: "unix", Addr: filepath.Join(t.TempDir(), "none.sock")}, wantFailed: "tcp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c connects
			cfg := tap.Config{Upstream: tc.upstream, Observer: c.observer()}
			if tc.serverName != "" {
				var err error
				if cfg.UpstreamTLS, err = tap.UpstreamTLSConfig(caFile, tc.serverName, "", ""); err != nil {
					t.Fatal(err)
				}
			}
			_, addr := startTap(t, cfg, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s := xdstest.MustOpenRaw(t, ctx, xdstest.MustDial(t, addr), xdstest.ADSMethod)
			xdstest.Send(s, []byte("x"))
			xdstest.Recv(s)

			u := c.wait(t)
			if u.FailedPhase != tc.wantFailed || (tc.wantFailed == "") != (u.Err == nil) {
				t.Errorf("FailedPhase %q, Err %v; want %q", u.FailedPhase, u.Err, tc.wantFailed)
			}
			if (u.DNS > 0) != tc.wantDNS || (u.TLS > 0) != tc.wantTLS || (u.TCP <= 0) {
				t.Errorf("phases dns=%v tcp=%v tls=%v; want dns %v, tls %v, and a tcp time", u.DNS, u.TCP, u.TLS, tc.wantDNS, tc.wantTLS)
			}
			if u.Upstream != tc.upstream.String() || u.ConnID == 0 || u.Start.IsZero() {
				t.Errorf("connect %+v does not say which upstream and connection", u)
			}
		})
	}
}
