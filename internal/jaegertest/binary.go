package jaegertest

import (
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
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("jaegertest: working directory: %v", err)
	}
	var path string // the nearest module's, for the message
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
			candidate := filepath.Join(dir, ".cache", "bin", "jaeger")
			if fi, err := os.Stat(candidate); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				return candidate
			}
			if path == "" {
				path = candidate
			}
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	if path == "" {
		t.Fatalf("jaegertest: no go.mod in %s or above it", wd)
	}
	if inCI() {
		t.Fatalf("jaegertest: no Jaeger binary at %s or beside a go.mod above it: %s", path, buildHint)
	}
	t.Skipf("jaegertest: no Jaeger binary at %s or beside a go.mod above it: %s", path, buildHint)
	return ""
}

func inCI() bool {
	switch os.Getenv("CI") {
	case "", "0", "false":
		return false
	}
	return true
}
