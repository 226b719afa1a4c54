package sidecar_test

import (
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/sidecar"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The template's own container, as the tests and the bench read it.
func TestInjected(t *testing.T) {
	leakcheck.Check(t)
	c, err := sidecar.Injected()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--listen={{ $tap }}", "--capture=/var/run/adstap/capture/xds.capture"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q: want %s among them", c.Args, want)
		}
	}
	if c.MemoryLimit < 64<<20 || c.MemoryRequest <= 0 || c.MemoryRequest > c.MemoryLimit {
		t.Errorf("memory request %d, limit %d: want 0 < request <= limit, limit at least 64 MiB", c.MemoryRequest, c.MemoryLimit)
	}
	if !slices.ContainsFunc(c.Env, func(e sidecar.EnvVar) bool { return e.Name == "POD_NAME" && e.Value == sidecar.FromDownwardAPI }) {
		t.Errorf("env %v: want POD_NAME from the downward API", c.Env)
	}
}

const small = `spec:
  initContainers:
  - name: adstap
    image: x
    args:
    - run
    - --listen={{ $tap }}
    - --capture=/var/run/capture.jsonl
    - --observe-queue-bytes=64MiB
    env:
    - name: ADSTAP_ADMIN
      value: {{ $admin | quote }}
    - name: ADSTAP_LOG_FORMAT
      value: json
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    resources:
      requests:
        cpu: 10m
        memory: 64Mi
      limits:
        cpu: 500m
        memory: 256Mi
  - name: istio-proxy
    args:
    - --not-ours
`

func TestCommandLine(t *testing.T) {
	leakcheck.Check(t)
	c, err := sidecar.Parse(small)
	if err != nil {
		t.Fatal(err)
	}
	if c.MemoryRequest != 64<<20 || c.MemoryLimit != 256<<20 {
		t.Errorf("memory request %d, limit %d; want 64 MiB and 256 MiB", c.MemoryRequest, c.MemoryLimit)
	}
	args, env, err := c.CommandLine(map[string]string{"--listen": "127.0.0.1:1", "--capture": "/tmp/c.jsonl", "ADSTAP_ADMIN": "127.0.0.1:2", "POD_NAME": ""})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(args, " "), "--listen=127.0.0.1:1 --capture=/tmp/c.jsonl --observe-queue-bytes=64MiB"; got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	if got, want := strings.Join(env, " "), "ADSTAP_ADMIN=127.0.0.1:2 ADSTAP_LOG_FORMAT=json"; got != want {
		t.Errorf("env %q, want %q", got, want)
	}
	for _, tc := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"ADSTAP_ADMIN": "a", "POD_NAME": ""}, "--listen={{ $tap }} is filled in by the injector"},
		{map[string]string{"--listen": "a", "POD_NAME": ""}, "ADSTAP_ADMIN is filled in"},
		{map[string]string{"--listen": "a", "ADSTAP_ADMIN": "a"}, "POD_NAME is filled in"},
		{map[string]string{"--listen": "a", "ADSTAP_ADMIN": "a", "POD_NAME": "", "--nope": "1"}, "--nope is not in the template"},
	} {
		if _, _, err := c.CommandLine(tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CommandLine(%v): error %v, want one saying %q", tc.set, err, tc.want)
		}
	}
	if _, err := sidecar.Parse(strings.Replace(small, "memory: 256Mi", "memory: lots", 1)); err == nil || !strings.Contains(err.Error(), "memory limit") {
		t.Errorf("a bad limit: error %v, want one naming the memory limit", err)
	}
}
