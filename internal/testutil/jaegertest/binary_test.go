package jaegertest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestBinaryOfTheRepositoryFromANestedModule: a module nested in the
// repository (istio/) has no .cache of its own; Binary finds the
// repository's, beside the go.mod further up.
func TestBinaryOfTheRepositoryFromANestedModule(t *testing.T) {
	leakcheck.Check(t)
	root := t.TempDir()
	nested := filepath.Join(root, "istio", "internal", "mesh")
	for _, dir := range []string{filepath.Join(root, ".cache", "bin"), nested} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(root, "go.mod"), 0o644},
		{filepath.Join(root, "istio", "go.mod"), 0o644},
		{filepath.Join(root, ".cache", "bin", "jaeger"), 0o755},
	} {
		if err := os.WriteFile(f.path, []byte("x"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(nested)
	if got, want := Binary(t), filepath.Join(root, ".cache", "bin", "jaeger"); got != want {
		t.Errorf("Binary from %s = %q, want the repository's %q", nested, got, want)
	}
}
