package main

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/leakcheck"
	"github.com/adstap/adstap/internal/syncbuf"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/internal/xdstest"
)

// TestCaptureDownload: an operator of a distroless pod (no tar, so no
// kubectl cp) gets the capture out through the admin address: the list,
// oldest first, then each file, which adstap inspect reads as it reads the
// file on disk. Nothing else on the disk is served.
func TestCaptureDownload(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	dir := t.TempDir()
	capturePath := filepath.Join(dir, "xds.jsonl")
	os.WriteFile(filepath.Join(dir, "other.txt"), []byte("not a capture"), 0o600)
	var log syncbuf.Buffer
	tapAddr, admin := startTracedTap(t, cp.Addr(), &log, "--capture="+capturePath, "--capture-max-bytes=4KiB", "--capture-max-files=3")
	const node = "sidecar~10.0.0.7~ratings-v1.default~default.svc.cluster.local"

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := xdstest.OpenSotW(t, ctx, xdstest.DialRaw(t, tapAddr))
	s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: node}, TypeUrl: resource.ClusterType})
	// Enough pushes to rotate the 4 KiB files.
	for i := 1; i <= 6; i++ {
		cp.SetSnapshot(t, node, "v"+string(rune('0'+i)), map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(3, 600)})
		r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
		s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce})
	}
	// The capture is written from a queue of its own: wait until the files
	// served hold the last ACK, then check what was served.
	var list struct{ Files []export.CaptureFile }
	var local []string
	var summary string
	out := t.TempDir()
	xdstest.Eventually(t, "the downloaded capture to hold v6's ACK", func() bool {
		list.Files = nil
		if err := json.Unmarshal(get(t, "http://"+admin+"/debug/capture"), &list); err != nil {
			t.Fatal(err)
		}
		local = local[:0]
		for _, f := range list.Files {
			p := filepath.Join(out, f.Name)
			os.WriteFile(p, get(t, "http://"+admin+f.URL), 0o600)
			local = append(local, p)
		}
		var stdout, stderr syncbuf.Buffer
		code := runCLI(context.Background(), append([]string{"inspect", "--summary-only"}, local...), &stdout, &stderr)
		summary = stdout.String()
		return code == exitOK && strings.Contains(summary, "v=v6 ack")
	})
	var names []string
	for _, f := range list.Files {
		names = append(names, f.Name)
	}
	if want := "xds.jsonl.2 xds.jsonl.1 xds.jsonl"; strings.Join(names, " ") != want {
		t.Fatalf("GET /debug/capture lists %v, want %s (oldest first)", names, want)
	}
	for i, f := range list.Files {
		body, err := os.ReadFile(local[i])
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(onDisk, body) || len(body) == 0 {
			t.Errorf("%s: the download is not the file as written (%d bytes, %d on disk)", f.URL, len(body), len(onDisk))
		}
	}
	for _, bad := range []string{"other.txt", "..%2Fother.txt", "xds.jsonl.9", "%2Fetc%2Fpasswd"} {
		resp, err := http.Get("http://" + admin + "/debug/capture/" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /debug/capture/%s = %d, want 404", bad, resp.StatusCode)
		}
	}
}
