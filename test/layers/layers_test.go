package layers

import (
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

const module = "github.com/adstap/adstap/"

// supportAreas hold what serves the tests and measures the tap: test
// support (internal/testutil/...), the suites (test/...) and the benchmark
// (benchmark/...). Everything else ships: in the binary, or, for the demo,
// in `make demo`'s (the demo build tag).
var supportAreas = []string{"internal/testutil/", "test/", "benchmark/"}

// isSupport reports whether dir is in a support area.
func isSupport(dir string) bool {
	return slices.ContainsFunc(supportAreas, func(area string) bool { return strings.HasPrefix(dir+"/", area) })
}

// mayImport lists, for every package that ships, the adstap packages its
// non-test files may import. A package above may import what those below it
// may: the table is the picture of docs/architecture.md.
var mayImport = map[string][]string{
	"codec":    {},
	"capture":  {},
	"deploy":   {},
	"redact":   {"codec"},
	"tap":      {"codec"},
	"track":    {"codec", "internal/weakintern", "internal/canon"},
	"refgraph": {"codec", "internal/weakintern", "internal/canon"},
	"origin":   {"codec", "track", "redact"},
	// What every output shares (export, on its internal packages), then the
	// outputs, a package each, which import no other: the upstream's
	// health is below the metrics and the page that read it, and the
	// readers of outputs (page, csds) are above them.
	"export/internal/outq":   {},
	"export/internal/shared": {"codec", "origin", "refgraph"},
	"export":                 {"track", "export/internal/outq", "export/internal/shared"},
	"export/upstream":        {"codec", "track", "export", "export/internal/shared"},
	"export/livelog":         {"codec", "origin", "track", "export", "export/internal/shared"},
	"export/recorder":        {"codec", "capture", "redact", "export", "export/internal/outq", "export/internal/shared"},
	"export/tracing":         {"codec", "origin", "refgraph", "track", "export", "export/internal/shared"},
	"export/references":      {"codec", "origin", "refgraph", "track", "export", "export/internal/outq", "export/internal/shared"},
	"export/retained":        {"codec", "redact", "track", "export", "export/internal/outq", "export/internal/shared"},
	"export/metrics":         {"codec", "track", "export", "export/internal/shared", "export/upstream"},
	"export/page":            {"codec", "origin", "track", "export/internal/shared", "export/references", "export/upstream"},
	"export/csds":            {"codec", "redact", "track", "export/internal/shared", "export/retained"},
	"internal/feed":          {"codec", "track", "redact"},
	"internal/gctune":        {},
	"internal/weakintern":    {},
	"internal/canon":         {},
	"internal/rollout":       {"origin"},
	"internal/inspect":       {"codec", "track", "origin", "capture", "redact", "export", "export/livelog", "refgraph", "internal/feed"},
	"internal/replay":        {"codec", "track", "origin", "export", "export/livelog", "internal/feed", "internal/inspect"},
	"internal/pipeline":      {"codec", "tap", "track", "origin", "capture", "redact", "export", "export/recorder", "export/tracing", "export/references", "export/page", "export/retained", "export/csds", "export/metrics", "export/upstream", "export/livelog", "refgraph", "internal/feed"},
	"internal/runconfig":     {"codec", "tap", "track", "origin", "capture", "redact", "export", "export/tracing", "export/references", "export/retained", "export/metrics", "refgraph", "internal/feed", "internal/gctune", "internal/pipeline"},
	"internal/xdsconfig":     {},
	"internal/controlplane":  {},
	"internal/demo":          {"internal/xdsconfig", "internal/controlplane"},
	"cmd/adstap":             {"codec", "tap", "track", "origin", "capture", "export", "export/tracing", "export/references", "export/page", "export/retained", "export/csds", "export/metrics", "export/upstream", "refgraph", "internal/feed", "internal/gctune", "internal/inspect", "internal/replay", "internal/pipeline", "internal/runconfig", "internal/rollout", "internal/demo"},
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// packages returns every directory of the module with Go files, relative to
// its root, and the root.
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
				return filepath.SkipDir // another module (istio/, deploy/grafana)
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

// imports returns what dir's non-test files import with the given build
// tags, and whether it has any (a directory of tests alone has none).
func imports(t *testing.T, root, dir string, tags ...string) ([]string, bool) {
	t.Helper()
	ctx := build.Default
	ctx.BuildTags = tags
	pkg, err := ctx.ImportDir(filepath.Join(root, dir), 0)
	if err != nil {
		if _, ok := err.(*build.NoGoError); ok {
			return nil, false
		}
		t.Fatalf("%s: %v", dir, err)
	}
	return pkg.Imports, true
}

// own keeps the adstap packages of imports, relative to the module.
func own(imports []string) []string {
	var out []string
	for _, imp := range imports {
		if p, ok := strings.CutPrefix(imp, module); ok {
			out = append(out, p)
		}
	}
	return out
}

// eachShipped calls f with the imports of the non-test files of every
// package that ships, with and without the demo build tag.
func eachShipped(t *testing.T, f func(dir string, tags, imports []string)) {
	t.Helper()
	root, dirs := packages(t)
	for _, dir := range dirs {
		if isSupport(dir) {
			continue
		}
		for _, tags := range [][]string{nil, {"demo"}} {
			if got, ok := imports(t, root, dir, tags...); ok {
				f(dir, tags, got)
			}
		}
	}
}

// TestImportsPointOneWay fails when a package that ships imports one above
// or beside it, or anything of a support area, and when a package that
// ships is new to the table: say where it belongs.
func TestImportsPointOneWay(t *testing.T) {
	leakcheck.Check(t)
	eachShipped(t, func(dir string, tags, got []string) {
		allowed, known := mayImport[dir]
		if !known {
			t.Errorf("package %s ships (it is in none of %v) but is in no layer (tags %v): add it to mayImport, or move it to a support area", dir, supportAreas, tags)
			return
		}
		for _, imp := range own(got) {
			switch {
			case isSupport(imp):
				t.Errorf("%s imports %s (tags %v): nothing that ships imports %v", dir, imp, tags, supportAreas)
			case !slices.Contains(allowed, imp):
				t.Errorf("%s imports %s (tags %v): it may import only %v", dir, imp, tags, allowed)
			}
		}
	})
}

// TestOnlySupportLinksTesting fails when a package that ships imports
// testing in its non-test files: test machinery lives in the support areas,
// not beside shipped code. With TestImportsPointOneWay, nothing that ships
// links testing.
func TestOnlySupportLinksTesting(t *testing.T) {
	leakcheck.Check(t)
	eachShipped(t, func(dir string, tags, got []string) {
		if slices.Contains(got, "testing") {
			t.Errorf("%s links testing (tags %v): move what needs it under %v", dir, tags, supportAreas)
		}
	})
}

// TestShippedBinaryLinksNoTestOrDemoCode lists what `go build ./cmd/adstap`
// links: no testing package, nothing of a support area, no go-control-plane
// server or cache, no grpc-go xDS client (the demo brings them, behind its
// build tag).
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
		if p, ok := strings.CutPrefix(dep, module); ok && isSupport(p) {
			t.Errorf("the shipped adstap links %s, which is not part of the tap", p)
		}
	}
	t.Logf("the shipped adstap links %d packages", len(deps))
}
