package jaegertest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// buildHint is what to run when the Jaeger binary is missing.
const buildHint = "run scripts/build-jaeger.sh (or make jaeger-bin) to build it once"

// Binary returns the path of the Jaeger v2 binary that scripts/build-jaeger.sh
// builds into .cache/bin/jaeger at the root of the module: the first
// .cache/bin/jaeger found beside a go.mod, walking up from the test's working
// directory, so that a module nested in the repository (istio/) uses the
// repository's. Without it the test fails when the environment variable CI
// is set, since CI must run the span tests, and is skipped elsewhere; both
// say how to build it.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := binary()
	if err == nil {
		return path
	}
	if path == "" {
		t.Fatalf("jaegertest: %v", err)
	}
	if inCI() {
		t.Fatalf("jaegertest: no Jaeger binary at %s (%v): %s", path, err, buildHint)
	}
	t.Skipf("jaegertest: no Jaeger binary at %s: %s", path, buildHint)
	return ""
}

// Available reports whether the Jaeger binary is there, for a test that
// checks spans as one of several outputs and goes on without them.
func Available() bool {
	_, err := binary()
	return err == nil
}

// binary returns the binary's path, and an error when it is not there
// (with the path of the nearest module's, which it looked at first) or no
// module root can be found (without).
func binary() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	nearest := ""
	var nearestErr error
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
			path := filepath.Join(dir, ".cache", "bin", "jaeger")
			fi, err := os.Stat(path)
			if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				return path, nil
			}
			if err == nil {
				err = os.ErrPermission
			}
			if nearest == "" {
				nearest, nearestErr = path, err
			}
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	if nearest == "" {
		return "", fmt.Errorf("no go.mod in %s or above it", wd)
	}
	return nearest, nearestErr
}

func inCI() bool {
	switch os.Getenv("CI") {
	case "", "0", "false":
		return false
	}
	return true
}
