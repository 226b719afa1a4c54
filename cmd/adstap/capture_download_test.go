package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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

	"github.com/adstap/adstap/export/recorder"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// TestCaptureDownload: an operator of a distroless pod (no tar, so no
// kubectl cp) gets the capture out through the admin address: the list,
// oldest first, then each file, which adstap inspect reads as it reads the
// file on disk. Nothing else on the disk is served.
func TestCaptureDownload(t *testing.T) {
	leakcheck.Check(t)
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t))
	dir := t.TempDir()
	capturePath := filepath.Join(dir, "xds.capture")
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
	// served hold the last ACK. Until then the writer may be rotating, and a
	// file listed may be gone or renamed by the time it is fetched; so what
	// is checked is a second, fresh download, made once the ACK is written,
	// after which nothing more is and the files stay as they are.
	out := t.TempDir()
	download := func() (list []recorder.File, local []string, summary string, err error) {
		var page struct{ Files []recorder.File }
		b, err := fetch("http://" + admin + "/debug/capture")
		if err != nil {
			return nil, nil, "", err
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, nil, "", err
		}
		for _, f := range page.Files {
			body, err := fetch("http://" + admin + f.URL)
			if err != nil {
				return nil, nil, "", err
			}
			p := filepath.Join(out, f.Name)
			os.WriteFile(p, body, 0o600)
			local = append(local, p)
		}
		var stdout, stderr syncbuf.Buffer
		if code := runCLI(context.Background(), append([]string{"inspect", "--summary-only"}, local...), &stdout, &stderr); code != exitOK {
			return nil, nil, "", fmt.Errorf("adstap inspect on the downloaded files: exit %d\n%s", code, stderr.String())
		}
		return page.Files, local, stdout.String(), nil
	}
	xdstest.Eventually(t, "the downloaded capture to hold v6's ACK", func() bool {
		_, _, summary, err := download()
		return err == nil && strings.Contains(summary, "v=v6 ack")
	})
	list, local, summary, err := download()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(summary, "v=v6 ack") {
		t.Errorf("adstap inspect's summary of the download lacks the last push, v6, acknowledged:\n%s", summary)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
	}
	if want := "xds.capture.2 xds.capture.1 xds.capture"; strings.Join(names, " ") != want {
		t.Fatalf("GET /debug/capture lists %v, want %s (oldest first)", names, want)
	}
	for i, f := range list {
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
	for _, bad := range []string{"other.txt", "..%2Fother.txt", "xds.capture.9", "%2Fetc%2Fpasswd"} {
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

// fetch is GET url's body, or why there is none.
func fetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b, nil
}
