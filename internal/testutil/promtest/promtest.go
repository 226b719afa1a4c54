// Package promtest runs a real Prometheus server for tests: Debian's prometheus, on free loopback ports, scraping static targets.
package promtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Target is a scrape target and the labels Prometheus gives its series,
// as Kubernetes service discovery's relabelling would (pod, namespace).
type Target struct {
	Addr   string // host:port serving /metrics
	Labels map[string]string
}

// Server is a running Prometheus.
type Server struct {
	URL string // http://127.0.0.1:PORT
	log string // its output
}

const installHint = "install Debian's prometheus package (make test runs scripts/ensure-prometheus.sh), or set PROMETHEUS=/path/to/prometheus"

// Binary is the Prometheus server to run: $PROMETHEUS, else prometheus on
// the PATH. Without one the test is skipped, unless CI is set: there it
// fails.
func Binary(t testing.TB) string {
	t.Helper()
	name := os.Getenv("PROMETHEUS")
	if name == "" {
		name = "prometheus"
	}
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if inCI() {
		t.Fatalf("promtest: no Prometheus server (%v): %s", err, installHint)
	}
	t.Skipf("promtest: no Prometheus server (%v): %s", err, installHint)
	return ""
}

// Start runs Prometheus scraping targets every interval, with exemplar
// storage on (exemplars lead a NACK to its trace), and waits until it is
// ready. It is stopped at cleanup.
func Start(t testing.TB, interval time.Duration, targets ...Target) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, Config(interval, targets), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	for try := 1; try <= 3; try++ {
		var s *Server
		if s, err = start(t, bin, dir, config, try); err == nil {
			return s
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("promtest: %v", err)
	return nil
}

var errPortTaken = errors.New("its port was taken before it could listen")

func start(t testing.TB, bin, dir, config string, try int) (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	lis.Close()
	s := &Server{URL: "http://" + addr, log: filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", try))}
	out, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data-%d", try)),
		"--web.listen-address="+addr, "--enable-feature=exemplar-storage", "--log.level=warn")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		out.Close()
		close(exited)
	}()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			log, _ := os.ReadFile(s.log)
			if bytes.Contains(log, []byte("address already in use")) {
				return nil, errPortTaken
			}
			return nil, fmt.Errorf("the Prometheus server exited while starting:\n%s", log)
		default:
		}
		if resp, err := client.Get(s.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(func() {
					stop()
					if t.Failed() {
						log, _ := os.ReadFile(s.log)
						t.Logf("Prometheus's log:\n%s", log)
					}
				})
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(s.log)
			return nil, fmt.Errorf("the Prometheus server at %s was not ready within 60s:\n%s", s.URL, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Config is the configuration of a Prometheus scraping targets (as JSON,
// which is YAML): one job, adstap, a static config per target so each has
// its own labels.
func Config(interval time.Duration, targets []Target) []byte {
	type static struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels,omitempty"`
	}
	var statics []static
	for _, tg := range targets {
		statics = append(statics, static{Targets: []string{tg.Addr}, Labels: tg.Labels})
	}
	cfg := map[string]any{
		"global": map[string]any{"scrape_interval": interval.String(), "evaluation_interval": interval.String()},
		"scrape_configs": []any{map[string]any{
			"job_name":        "adstap",
			"scrape_interval": interval.String(),
			"scrape_timeout":  interval.String(),
			"static_configs":  statics,
		}},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return b
}

// inCI reports whether CI is set, as CI services set it (CI=true).
func inCI() bool {
	v := strings.TrimSpace(os.Getenv("CI"))
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}
