package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/export/page"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/track"
)

// startObservedTap starts the tap as adstap run does, in front of upstream,
// with its admin server on loopback, and returns the tap's and admin's addresses.
func startObservedTap(t *testing.T, upstream string, log *syncbuf.Buffer) (tapAddr, admin string) {
	t.Helper()
	return startTracedTap(t, upstream, log)
}

func getStreams(t *testing.T, admin, query string) page.Streams {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/debug/streams" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var streams page.Streams
	if err := json.NewDecoder(resp.Body).Decode(&streams); err != nil {
		t.Fatalf("decoding /debug/streams: %v", err)
	}
	return streams
}

// TestNACKFromGRPCGoShowsInDebugStreams: grpc-go's xDS client rejects a
// cluster with lb_policy MAGLEV; /debug/streams shows CDS NACKED with
// grpc-go's own message, and SYNCED once the cluster is fixed.
func TestNACKFromGRPCGoShowsInDebugStreams(t *testing.T) {
	leakcheck.Check(t)
	backend := xdstest.StartBackend(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	const node = "proxyless~10.0.0.3~client.default~default.svc.cluster.local"
	var log syncbuf.Buffer
	tapAddr, admin := startObservedTap(t, cp.Addr(), &log)

	cp.SetSnapshot(t, node, "2026-11-30T09:00:00Z/1", xdsconfig.ResolverResourcesMaglev("greeter", backend))
	cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tapAddr, node)))
	cc.Connect() // leaves idle, which starts the xDS client

	cds := func() (state track.State, lastErr string) {
		page := getStreams(t, admin, "?node="+node)
		for _, s := range page.Streams {
			if ts, ok := s.Types[resource.ClusterType]; ok {
				return ts.State, ts.LastError
			}
		}
		return "", ""
	}
	const wantPrefix = `error parsing "ClusterResource" response: resource "cluster-greeter": unexpected lbPolicy MAGLEV in response: `
	xdstest.Eventually(t, "CDS NACKED", func() bool { s, _ := cds(); return s == track.StateNACKed })
	if _, msg := cds(); !strings.HasPrefix(msg, wantPrefix) {
		t.Errorf("CDS last_error = %q, want grpc-go's message starting %q", msg, wantPrefix)
	}

	cp.SetSnapshot(t, node, "2026-11-30T09:00:05Z/2", xdsconfig.ResolverResources("greeter", backend))
	xdstest.Eventually(t, "CDS SYNCED", func() bool { s, _ := cds(); return s == "SYNCED" })
	if got := getStreams(t, admin, "?node=nobody"); len(got.Streams) != 0 {
		t.Errorf("?node=nobody returned %d streams, want 0", len(got.Streams))
	}
	for _, want := range []string{`"result":"nack"`, `"result":"ack"`, "unexpected lbPolicy MAGLEV"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("live log lacks %s", want)
		}
	}
	cc.Close()
}
