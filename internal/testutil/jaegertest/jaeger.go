package jaegertest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Jaeger is a running Jaeger v2 all-in-one with memory storage, alone on
// free loopback ports. Its addresses are host:port on 127.0.0.1.
type Jaeger struct {
	OTLPGRPC  string // OTLP/gRPC receiver: otlptracegrpc.WithEndpoint(j.OTLPGRPC), WithInsecure
	OTLPHTTP  string // OTLP/HTTP receiver: otlptracehttp.WithEndpoint(j.OTLPHTTP), WithInsecure
	QueryHTTP string // query API and UI: http://QueryHTTP/
	QueryGRPC string // query gRPC API (api_v2 and api_v3 QueryService)

	client *http.Client
}

const (
	startTimeout = 60 * time.Second // a cold start under -race on 2 busy cores
	startTries   = 3                // a free port picked can be taken before Jaeger binds it
	logTail      = 64 << 10         // bytes of Jaeger's log shown on failure
)

var errPortTaken = errors.New("a port picked for Jaeger was taken before it bound it")

// Start starts Jaeger and waits until its query API and both OTLP receivers
// answer. It opens four ports, those in Jaeger's fields, each a free
// 127.0.0.1 port, so any number of Jaegers can run at
// once, beside one on the standard ports too. Its output goes to a log file
// in t.TempDir(), shown when the test fails. Jaeger is killed, and waited
// for, at cleanup: start it before the exporters sending to it, so that
// their cleanups (shutting them down) run first. Call it from the test's
// goroutine.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	var err error
	for try := 1; try <= startTries; try++ {
		var j *Jaeger
		j, err = start(t, bin, filepath.Join(dir, fmt.Sprintf("jaeger-%d.log", try)))
		if err == nil {
			return j
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
		t.Logf("jaegertest: %v; picking other ports", err)
	}
	t.Fatalf("jaegertest: %v", err)
	return nil
}

func start(t testing.TB, bin, logPath string) (*Jaeger, error) {
	addrs, err := freeAddrs(4)
	if err != nil {
		return nil, err
	}
	j := &Jaeger{
		OTLPGRPC:  addrs[0],
		OTLPHTTP:  addrs[1],
		QueryHTTP: addrs[2],
		QueryGRPC: addrs[3],
		// No keep-alives: no idle connection goroutines outlive a request,
		// for the goleak checks of the packages using this one.
		client: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{DisableKeepAlives: true},
		},
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	cmd := exec.Command(bin, args(j.OTLPGRPC, j.OTLPHTTP, j.QueryHTTP, addrs[3])...)
	cmd.Env = env()
	cmd.Dir = filepath.Dir(logPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	stop := func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
	}

	if err := j.waitReady(exited); err != nil {
		stop()
		log := readTail(logPath)
		if errors.Is(err, errExited) {
			err = fmt.Errorf("%w (%v)", err, waitErr)
			if strings.Contains(log, "address already in use") {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
		}
		return nil, fmt.Errorf("%w; its log %s:\n%s", err, logPath, log)
	}
	t.Cleanup(func() {
		stop()
		j.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("jaegertest: Jaeger's log %s:\n%s", logPath, readTail(logPath))
		}
	})
	return j, nil
}

// args are the flags that start the Jaeger v2 all-in-one (its embedded
// default configuration, memory storage) with only what the tests need, on
// the given host:port addresses: the OTLP receivers, the query HTTP API and
// UI, and the query gRPC API (always started by jaeger_query). The default
// configuration's other listeners (jaeger and zipkin receivers, remote
// sampling, health check, expvar, zpages, the collector's own metrics on
// 8888) are left out of the service, so none of them opens a port; Jaeger
// must also run with JAEGER_LISTEN_HOST=127.0.0.1 so anything left on a
// default port would be on loopback only.
func args(otlpGRPC, otlpHTTP, queryHTTP, queryGRPC string) []string {
	return []string{
		"--set=service.extensions=[jaeger_storage,jaeger_query]",
		"--set=service.pipelines.traces.receivers=[otlp]",
		"--set=service.telemetry.metrics.level=none",
		// Else the query service traces itself to OTEL_EXPORTER_OTLP_ENDPOINT
		// or localhost:4317: whichever Jaeger a developer runs there.
		"--set=extensions.jaeger_query.enable_tracing=false",
		"--set=extensions.jaeger_query.http.endpoint=" + queryHTTP,
		"--set=extensions.jaeger_query.grpc.endpoint=" + queryGRPC,
		"--set=receivers.otlp.protocols.grpc.endpoint=" + otlpGRPC,
		"--set=receivers.otlp.protocols.http.endpoint=" + otlpHTTP,
	}
}

// env is the test's environment without the OTEL_ and JAEGER_ variables a
// developer may have set for a Jaeger of their own, plus loopback only.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OTEL_") || strings.HasPrefix(kv, "JAEGER_") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "JAEGER_LISTEN_HOST=127.0.0.1")
}

// freeAddrs picks n distinct free TCP ports on 127.0.0.1, all held at once so
// they differ, then released for Jaeger to bind.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer lis.Close()
		addrs = append(addrs, lis.Addr().String())
	}
	return addrs, nil
}

var errExited = errors.New("Jaeger exited while starting")

// waitReady polls until the query API answers 200 on /api/services, the
// OTLP/HTTP receiver answers HTTP and the OTLP/gRPC one accepts connections.
func (j *Jaeger) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := j.ready()
		select {
		case <-exited:
			return errExited
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Jaeger not ready after %v: %w", startTimeout, err)
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (j *Jaeger) ready() error {
	resp, err := j.client.Get("http://" + j.QueryHTTP + "/api/services")
	if err != nil {
		return fmt.Errorf("query API: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("query API: GET /api/services: %s", resp.Status)
	}
	resp, err = j.client.Get("http://" + j.OTLPHTTP + "/v1/traces")
	if err != nil {
		return fmt.Errorf("OTLP/HTTP receiver: %w", err)
	}
	resp.Body.Close() // any answer will do: it wants a POST
	c, err := net.DialTimeout("tcp", j.OTLPGRPC, time.Second)
	if err != nil {
		return fmt.Errorf("OTLP/gRPC receiver: %w", err)
	}
	return c.Close()
}

// readTail returns the end of a log file.
func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read it: %v)", err)
	}
	if len(b) > logTail {
		b = b[len(b)-logTail:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		b = append([]byte("...\n"), b...)
	}
	return string(b)
}
