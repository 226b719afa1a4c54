package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/adstap/adstap/internal/demo"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
)

// chromium finds Debian's chromium (ADSTAP_CHROMIUM names another). Without
// it the test fails in CI, which must run it (.ci/run installs the package),
// and is skipped elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ADSTAP_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const hint = "install it with: apt-get install -y --no-install-recommends chromium (make test does when it can)"
	switch os.Getenv("CI") {
	case "", "0", "false":
		t.Skip("no chromium for the live page's browser test: " + hint)
	}
	t.Fatal("no chromium for the live page's browser test: " + hint)
	return ""
}

// browser starts a headless chromium with a fresh profile and returns a tab's
// context and the console's errors so far (calls of console.error, uncaught
// exceptions, and browser log errors such as a blocked script or a failed load).
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	path := chromium(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1080),
	)
	ctx, cancelTab := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc()
	})
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, "console."+string(ev.Type)+": "+strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
			problems = append(problems, "exception: "+text)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				problems = append(problems, "log: "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		}
	}); err != nil {
		t.Fatalf("starting chromium (%s): %v", path, err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}

// waitJS waits until a JavaScript expression is truthy on the page.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(40*time.Second))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main").innerText`))
		t.Fatalf("waiting for %s (%s): %v\nthe page says:\n%s", what, expr, err, html)
	}
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// TestLivePageInARealBrowser runs the demo's mesh through a real tap and
// reads its admin page in headless chromium: the NACKed stream and the
// client's message in the table, the active detectors, the timeline's marks
// with their hover text, the page following new pushes by itself, wire
// strings holding markup shown as text, and a console without errors.
// ADSTAP_UPDATE_SCREENSHOT=1 writes the screenshot to docs/page.png.
func TestLivePageInARealBrowser(t *testing.T) {
	leakcheck.Check(t)
	ctx, consoleProblems := browser(t)

	// The demo: go-control-plane, grpc-go's xDS client, the Delta client,
	// and the scenario that pushes, breaks (MAGLEV) and fixes.
	var logBuf syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logBuf, nil))
	meshCtx, stopMesh := context.WithCancel(context.Background())
	backend, stopBackend, err := demo.StartBackend()
	if err != nil {
		t.Fatal(err)
	}
	cpLis, err := demo.Listen()
	if err != nil {
		t.Fatal(err)
	}
	const interval = time.Second
	cp := demo.StartControlPlane(meshCtx, cpLis, logger, interval/4)
	tapAddr, admin := startTracedTap(t, cp.Addr(), &logBuf)
	var wg sync.WaitGroup
	run := func(fn func(context.Context) error) {
		wg.Add(1)
		go func() { defer wg.Done(); fn(meshCtx) }()
	}
	t.Cleanup(func() { // before the tap's cleanup, registered earlier
		stopMesh()
		wg.Wait()
		cp.Stop()
		stopBackend()
	})
	scenario := &demo.Scenario{CP: cp, Backend: backend, Interval: interval, Log: logger}
	run(scenario.Run)
	run(func(ctx context.Context) error { return demo.RunProxyless(ctx, tapAddr, logger) })
	run(func(ctx context.Context) error { return demo.RunDelta(ctx, tapAddr, logger) })

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+admin+"/")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	waitJS(t, ctx, "both demo streams in the table", `document.querySelectorAll("#streams tbody tr").length >= 2`)
	waitJS(t, ctx, "the MAGLEV NACK with the client's message",
		`[...document.querySelectorAll("#streams td.error")].some(td => td.textContent.includes("unexpected lbPolicy MAGLEV"))`)
	nackedRow := evalJS[string](t, ctx, `[...document.querySelectorAll("#streams tbody tr")].find(tr => tr.querySelector('td[data-type="cds"][data-state="NACKED"]')).innerText`)
	for _, want := range []string{"ERROR", "unexpected lbPolicy MAGLEV", "— from DestinationRule demo/greeter-maglev", "demo-control-plane-0"} {
		if !strings.Contains(nackedRow, want) {
			t.Errorf("the NACKed stream's row lacks %q: %q", want, nackedRow)
		}
	}
	waitJS(t, ctx, "an active NACK detector", `[...document.querySelectorAll("#detectors tbody tr")].some(tr => /nack_(storm|loop)/.test(tr.dataset.detector))`)

	// The proxyless client's timeline: ACKs and NACKs as marks, with their
	// latency and size in the hover text.
	proxyless := evalJS[int](t, ctx, `Number([...document.querySelectorAll("#streams tbody tr")].find(tr => tr.innerText.includes("greeter-client")).dataset.stream)`)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(fmt.Sprintf(`#streams tr[data-stream="%d"]`, proxyless)))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the timeline's ACK and NACK marks", `document.querySelector("#timeline-title").textContent.includes("stream `+fmt.Sprint(proxyless)+`") &&
		document.querySelectorAll('#timeline circle.mark[data-result="ack"]').length > 0 &&
		document.querySelectorAll('#timeline circle.mark[data-result="nack"]').length > 0`)
	hover := evalJS[string](t, ctx, `document.querySelector('#timeline circle.mark[data-result="nack"] title').textContent`)
	for _, want := range []string{"CDS version", "NACK after ", "ms", " B, ", "resources", "rejected: ", "unexpected lbPolicy MAGLEV"} {
		if !strings.Contains(hover, want) {
			t.Errorf("a NACK mark's hover text lacks %q:\n%s", want, hover)
		}
	}
	// Hovering the latest NACK mark shows the same text in the page's tooltip.
	shown := evalJS[string](t, ctx, `(() => {
		const marks = document.querySelectorAll('#timeline circle.mark[data-result="nack"]');
		const m = marks[marks.length - 1], r = m.getBoundingClientRect();
		m.dispatchEvent(new MouseEvent("mouseenter", {clientX: r.x + r.width / 2, clientY: r.y + r.height / 2}));
		const tip = document.getElementById("tooltip");
		return tip.hidden ? "" : tip.textContent;
	})()`)
	if !strings.Contains(shown, "NACK after ") || !strings.Contains(shown, "unexpected lbPolicy MAGLEV") {
		t.Errorf("hovering a NACK mark shows %q, want its outcome and message", shown)
	}
	if os.Getenv("ADSTAP_UPDATE_SCREENSHOT") != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "page.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The page follows the tap by itself: a new push becomes the last mark.
	last := `(() => { const m = [...document.querySelectorAll("#timeline circle.mark title")]; return m.length ? m[m.length-1].textContent : ""; })()`
	before := evalJS[string](t, ctx, last)
	waitJS(t, ctx, "a new push on the timeline", last+` !== `+jsString(before))

	// Markup from the wire is text: a node id and a NACK message holding
	// tags reach the table as the characters they are.
	const evilNode = `sidecar~10.0.0.66~<b id="evil-node">x</b>.demo~demo.svc.cluster.local`
	const evilMessage = `<script>window.__adstapXSS = 1</script><img src=x onerror="window.__adstapXSS = 2"> rejected`
	bad := map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1, 0)}
	bad[resource.ClusterType][0].(*clusterv3.Cluster).LbPolicy = clusterv3.Cluster_MAGLEV
	if err := cp.Set("v-evil", bad, evilNode); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := xdstest.OpenSotW(t, sctx, xdstest.DialRaw(t, tapAddr))
	if err := s.Send(&discovery.DiscoveryRequest{Node: &core.Node{Id: evilNode}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	r := xdstest.RecvWithin(t, 10*time.Second, s.Recv)
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.Nonce,
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: evilMessage}}); err != nil {
		t.Fatal(err)
	}
	// The message, then what adstap says of its source (a go-control-plane
	// cluster: no Istio config).
	waitJS(t, ctx, "the message with markup, as text", `[...document.querySelectorAll("#streams td.error")].some(td => td.textContent.startsWith("CDS: " + `+jsString(evilMessage)+` + " — no Istio config recorded in "))`)
	if got := evalJS[string](t, ctx, `[...document.querySelectorAll("#streams td")].find(td => td.textContent.includes("evil-node")).textContent`); got != `<b id="evil-node">x</b>.demo` {
		t.Errorf("the node's name shows as %q, want its characters", got)
	}
	if n := evalJS[int](t, ctx, `document.querySelectorAll("#evil-node, main script, main img").length + (window.__adstapXSS ? 100 : 0)`); n != 0 {
		t.Errorf("markup from the wire became elements or ran (%d)", n)
	}

	// A route to a cluster the snapshot lacks, ACKed: every type SYNCED,
	// and "Routes to nowhere" names the cluster and the VirtualService.
	const splitNode = "sidecar~10.0.0.77~productpage-v1.demo~demo.svc.cluster.local"
	const missing = "outbound|9080|v2|reviews.demo.svc.cluster.local"
	split := xdsconfig.Route("route-split", "reviews", missing)
	split.VirtualHosts[0].Routes[0].Metadata = xdsconfig.IstioConfig("virtual-service", "demo", "reviews-split")
	if err := cp.Set("v-split", map[resource.Type][]types.Resource{resource.ClusterType: xdsconfig.Clusters(1, 0), resource.RouteType: {split}}, splitNode); err != nil {
		t.Fatal(err)
	}
	ss := xdstest.OpenSotW(t, sctx, xdstest.DialRaw(t, tapAddr))
	for _, req := range []*discovery.DiscoveryRequest{
		{Node: &core.Node{Id: splitNode}, TypeUrl: resource.ClusterType},
		{TypeUrl: resource.RouteType, ResourceNames: []string{"route-split"}},
	} {
		if err := ss.Send(req); err != nil {
			t.Fatal(err)
		}
		r := xdstest.RecvWithin(t, 10*time.Second, ss.Recv)
		if err := ss.Send(&discovery.DiscoveryRequest{TypeUrl: req.TypeUrl, ResourceNames: req.ResourceNames, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce}); err != nil {
			t.Fatal(err)
		}
	}
	waitJS(t, ctx, "the route to nowhere", `[...document.querySelectorAll("#dangling tbody tr")].some(tr => tr.dataset.kind === "route_cluster" &&
		tr.innerText.includes(`+jsString(missing)+`) && tr.innerText.includes("503 NC") && tr.innerText.includes("VirtualService demo/reviews-split"))`)

	if p := consoleProblems(); len(p) > 0 {
		t.Errorf("the console has errors:\n%s", strings.Join(p, "\n"))
	}
}

// jsString quotes s as a JavaScript string literal (JSON's is one).
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestLivePageShowsAFailingUpstream: with the control plane's certificate
// expired no proxy gets a stream; the page says the upstream fails, why in
// words, how many attempts failed and the error, in a real headless chromium.
func TestLivePageShowsAFailingUpstream(t *testing.T) {
	leakcheck.Check(t)
	ctx, consoleProblems := browser(t)
	const istiod = "istiod.istio-system.svc"
	ca := xdstest.NewCA(t)
	caFile := xdstest.WriteFiles(t, "", "root-cert.pem", ca.CertPEM())
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.IssueExpired(t, istiod, []string{istiod}, nil).TLSCertificate()}})
	cp := xdstest.StartControlPlane(t, xdstest.ListenTCP(t), grpc.Creds(creds))
	var logBuf syncbuf.Buffer
	tapAddr, admin := startTracedTap(t, cp.Addr(), &logBuf, "--upstream-ca="+caFile, "--upstream-server-name="+istiod)
	cc := xdstest.DialRaw(t, "xds:///greeter", grpc.WithResolvers(xdstest.XDSResolver(t, tapAddr, "sidecar~10.0.0.9~productpage-v1-6b7f.shop~shop.svc.cluster.local")))
	cc.Connect()

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+admin+"/")); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	waitJS(t, ctx, "the failing upstream, after two attempts", `!document.getElementById("upstream-section").hidden &&
		/; [2-9]\d* attempts failed since the last success/.test(document.getElementById("upstream").textContent)`)
	shown := evalJS[string](t, ctx, `document.getElementById("upstream").textContent + "\n" + document.getElementById("upstream-error").textContent + "\n" + document.getElementById("summary").textContent`)
	for _, want := range []string{"Upstream " + cp.Addr() + " FAILING: the control plane's certificate has expired", "x509: certificate has expired", "upstream FAILING, 0 streams"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the page lacks %q:\n%s", want, shown)
		}
	}
	if reason := evalJS[string](t, ctx, `document.getElementById("upstream").dataset.reason`); reason != "certificate_expired" {
		t.Errorf("the upstream's reason is %q, want certificate_expired", reason)
	}
	if p := consoleProblems(); len(p) > 0 {
		t.Errorf("the console has errors:\n%s", strings.Join(p, "\n"))
	}
}
