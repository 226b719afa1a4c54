package jaegertest

import (
	"os"
	"path/filepath"
	"testing"
)

// buildHint is what to run when the Jaeger binary is missing.
const buildHint = "run scripts/build-jaeger.sh (or make jaeger-bin) to build it once"

// Binary returns the path of the Jaeger v2 binary that scripts/build-jaeger.sh
// builds into .cache/bin/jaeger at the root of the module (found by walking up
// from the test's working directory to go.mod). Without it the test fails when
// the environment variable CI is set, since CI must run the span tests, and is
// skipped elsewhere; both say how to build it.
func Binary(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("jaegertest: working directory: %v", err)
	}
	root := ""
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil && !fi.IsDir() {
			root = dir
			break
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	if root == "" {
		t.Fatalf("jaegertest: no go.mod in %s or above it", wd)
	}
	path := filepath.Join(root, ".cache", "bin", "jaeger")
	fi, err := os.Stat(path)
	if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
		return path
	}
	if err == nil {
		err = os.ErrPermission
	}
	if inCI() {
		t.Fatalf("jaegertest: no Jaeger binary at %s (%v): %s", path, err, buildHint)
	}
	t.Skipf("jaegertest: no Jaeger binary at %s: %s", path, buildHint)
	return ""
}

func inCI() bool {
	switch os.Getenv("CI") {
	case "", "0", "false":
		return false
	}
	return true
}
