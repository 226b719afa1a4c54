package benchmark

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"github.com/adstap/adstap/internal/gctune"
	"github.com/adstap/adstap/internal/testutil/sidecar"
)

// sidecarMiddle is the adstap binary started as the injection template
// starts it (internal/testutil/sidecar): its usage is read from /proc, from outside.
type sidecarMiddle struct {
	p     *sidecar.Process
	dir   string // its capture directory
	start Usage
}

// startSidecar runs bin in front of upstream with the template's flags and
// environment, a capture file in a directory of its own (none without
// capture), and GOMEMLIMIT as the template's memory limit gives it
// (internal/gctune): what the container would run.
func startSidecar(bin, upstream string, capture bool) (Middle, error) {
	if bin == "" {
		return nil, errors.New("no adstap binary to run (adstap-bench -adstap)")
	}
	c, err := sidecar.Injected()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "adstap-bench-sidecar")
	if err != nil {
		return nil, err
	}
	set := map[string]string{
		"--listen":               "127.0.0.1:0",
		"--upstream":             upstream,
		"--upstream-ca":          "", // plaintext on loopback
		"--upstream-server-name": "",
		"--capture":              filepath.Join(dir, "xds.capture"),
		"--metrics-listen":       "127.0.0.1:0",
		"--csds-listen":          "127.0.0.1:0",
		"ADSTAP_ADMIN":           "127.0.0.1:0",
		// No collector here; the pod's name and namespace come from the kubelet.
		"OTEL_EXPORTER_OTLP_ENDPOINT": "",
		"POD_NAME":                    "",
		"POD_NAMESPACE":               "",
	}
	if !capture {
		set["--capture"], set["--capture-max-bytes"], set["--capture-max-files"] = "", "", ""
	}
	args, env, err := c.CommandLine(set)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	env = append(env, "GOMEMLIMIT="+strconv.FormatInt(gctune.SoftLimit(c.MemoryLimit), 10))
	p, err := sidecar.Start(bin, args, env)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &sidecarMiddle{p: p, dir: dir}, nil
}

func (m *sidecarMiddle) Addr() string { return m.p.Listen }

func (m *sidecarMiddle) Begin() error {
	if err := resetPeakRSSOf(m.p.Cmd.Process.Pid); err != nil {
		return err
	}
	u, err := m.Sample()
	m.start = u
	return err
}

func (m *sidecarMiddle) End() (Window, error) {
	u, err := m.Sample()
	return window(m.start, u), err
}

func (m *sidecarMiddle) Sample() (Usage, error) { return processUsage(m.p.Cmd.Process.Pid) }

// SampleAfterGC cannot make another process collect: it reads its usage as
// it is.
func (m *sidecarMiddle) SampleAfterGC() (Usage, error) { return m.Sample() }

func (m *sidecarMiddle) Close() error {
	err := m.p.Stop()
	os.RemoveAll(m.dir)
	return err
}
