package layers

import (
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"go.uber.org/goleak"
)

const module = "github.com/adstap/adstap/"

// mayImport lists, for every package of the tap that ships (cmd/adstap and
// what it links), the adstap packages its non-test files may import. A
// package above may import what those below it may: the table is the
// picture of docs/architecture.md.
var mayImport = map[string][]string{
	"codec":             {},
	"capture":           {},
	"redact":            {"codec"},
	"tap":               {"codec"},
	"track":             {"codec"},
	"refgraph":          {"codec"},
	"origin":            {"codec", "track", "redact"},
	"export":            {"codec", "track", "origin", "capture", "redact", "refgraph"},
	"internal/gctune":   {},
	"internal/rollout":  {"origin"},
	"internal/inspect":  {"codec", "track", "origin", "capture", "redact", "export", "refgraph"},
	"internal/pipeline": {"codec", "tap", "track", "origin", "capture", "redact", "export", "refgraph"},
	"cmd/adstap":        {"codec", "tap", "track", "origin", "capture", "export", "refgraph", "internal/gctune", "internal/inspect", "internal/pipeline", "internal/rollout"},
}

// demoImports are what cmd/adstap's files may add under the demo build tag
// (make demo); the shipped binary has none of them.
var demoImports = []string{"internal/demo"}

// tools are built from this module but never shipped in the tap: they may
// use test support, and nothing of the tap may import them.
var tools = []string{"cmd/adstap-bench", "internal/bench", "internal/demo", "internal/layers"}

// testSupportAreas hold everything a test imports that links testing:
// peers, starters, leak checks (internal/testutil/...) and the suites that
// run the whole binary (test/...). Nothing outside them links testing.
var testSupportAreas = []string{"internal/testutil/", "test/"}

// fixtures serve tests and tools (the bench, the demo) without linking
// testing: realistic resources, metric sums, the injected container.
var fixtures = []string{"internal/xdsconfig", "internal/promsum", "internal/sidecar"}

// inTestSupportArea reports whether dir is under one of testSupportAreas.
func inTestSupportArea(dir string) bool {
	return slices.ContainsFunc(testSupportAreas, func(area string) bool { return strings.HasPrefix(dir+"/", area) })
}

// isTestSupport reports whether dir serves tests (and tools) only.
func isTestSupport(dir string) bool { return inTestSupportArea(dir) || slices.Contains(fixtures, dir) }

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// packages returns every package directory of the module, relative to its
// root, and the root.
func packages(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "bin") {
			return filepath.SkipDir
		}
		if rel != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module (istio/)
			}
		}
		if matches, _ := filepath.Glob(filepath.Join(path, "*.go")); len(matches) > 0 {
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, dirs
}

// imports returns the adstap packages that dir's non-test files import, with
// the given build tags.
func imports(t *testing.T, root, dir string, tags ...string) []string {
	t.Helper()
	ctx := build.Default
	ctx.BuildTags = tags
	pkg, err := ctx.ImportDir(filepath.Join(root, dir), 0)
	if err != nil {
		if _, ok := err.(*build.NoGoError); ok {
			return nil
		}
		t.Fatalf("%s: %v", dir, err)
	}
	var own []string
	for _, imp := range pkg.Imports {
		if p, ok := strings.CutPrefix(imp, module); ok {
			own = append(own, p)
		}
	}
	return own
}

// TestImportsPointOneWay fails when a package imports one above it or beside
// it, when the tap imports a tool or test support, and when a package is new
// to this table: say where it belongs.
func TestImportsPointOneWay(t *testing.T) {
	leakcheck.Check(t)
	root, dirs := packages(t)
	for _, dir := range dirs {
		for _, tags := range [][]string{nil, {"demo"}} {
			got := imports(t, root, dir, tags...)
			switch {
			case mayImport[dir] != nil:
				allowed := mayImport[dir]
				if len(tags) > 0 && dir == "cmd/adstap" {
					allowed = append(slices.Clone(allowed), demoImports...)
				}
				for _, imp := range got {
					if !slices.Contains(allowed, imp) {
						t.Errorf("%s imports %s (tags %v): it may import only %v", dir, imp, tags, allowed)
					}
				}
			case slices.Contains(tools, dir), isTestSupport(dir):
				for _, imp := range got {
					if slices.Contains(tools, imp) && imp != "internal/demo" && imp != "internal/bench" {
						t.Errorf("%s imports the tool %s", dir, imp)
					}
				}
			case dir == "deploy":
				// Manifests and their tests; no Go of its own to ship.
			default:
				t.Errorf("package %s is in no layer: add it to mayImport or tools, or put it in a test-support area", dir)
			}
		}
	}
}

// TestShippedBinaryLinksNoTestOrDemoCode lists what `go build ./cmd/adstap`
// links: no testing package, no go-control-plane server or cache, no grpc-go
// xDS client (the demo brings them, behind its build tag).
func TestShippedBinaryLinksNoTestOrDemoCode(t *testing.T) {
	leakcheck.Check(t)
	root, _ := packages(t)
	gobin := filepath.Join(build.Default.GOROOT, "bin", "go")
	cmd := exec.Command(gobin, "list", "-deps", "./cmd/adstap")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/adstap: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, banned := range []string{"testing", "github.com/envoyproxy/go-control-plane/pkg/server/", "github.com/envoyproxy/go-control-plane/pkg/cache/", "google.golang.org/grpc/xds"} {
			if dep == banned || strings.HasPrefix(dep, banned) {
				t.Errorf("the shipped adstap links %s", dep)
			}
		}
		if p, ok := strings.CutPrefix(dep, module); ok && (slices.Contains(tools, p) || isTestSupport(p)) {
			t.Errorf("the shipped adstap links %s, which is not part of the tap", p)
		}
	}
	t.Logf("the shipped adstap links %d packages", len(deps))
}

// TestOnlyTestSupportLinksTesting fails when a package outside the
// test-support areas imports testing in its non-test files: test machinery
// lives in internal/testutil/... and test/..., not beside shipped code.
func TestOnlyTestSupportLinksTesting(t *testing.T) {
	leakcheck.Check(t)
	root, dirs := packages(t)
	for _, dir := range dirs {
		for _, tags := range [][]string{nil, {"demo"}} {
			ctx := build.Default
			ctx.BuildTags = tags
			pkg, err := ctx.ImportDir(filepath.Join(root, dir), 0)
			if err != nil {
				continue // no Go files: packages() reports the rest
			}
			if slices.Contains(pkg.Imports, "testing") && !inTestSupportArea(dir) {
				t.Errorf("%s links testing (tags %v): move it under %v", dir, tags, testSupportAreas)
			}
		}
	}
}
