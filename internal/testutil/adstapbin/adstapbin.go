// Package adstapbin builds the adstap that ships (./cmd/adstap, as make build does), once per test binary, and starts it as a process for the tests that run it so.
package adstapbin

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

const module = "github.com/adstap/adstap"

var (
	once  sync.Once
	built string
	err   error
)

// Build returns the path of adstap built from this repository's
// ./cmd/adstap, building it on the first call. The repository is the first
// directory, walking up from the test's, whose go.mod is adstap's (the
// Istio module's is further down).
func Build(t testing.TB) string {
	t.Helper()
	once.Do(func() { built, err = build() })
	if err != nil {
		t.Fatal(err)
	}
	return built
}

func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "adstap-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "adstap")
	// go test puts the go command running the tests first on PATH.
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/adstap")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build does
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/adstap in %s: %v\n%s", root, err, out)
	}
	return bin, nil
}

func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			line, _, _ := bufio.NewReader(bytes.NewReader(b)).ReadLine()
			if string(line) == "module "+module {
				return dir, nil
			}
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod of %s in %s or above it", module, wd)
		}
	}
}
