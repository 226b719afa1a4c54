package export_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// lockSites is every lock the outputs take, by the package (its directory
// under export), the function that takes it and the lock, and why no two
// streams wait for each other on it for a frame: the stream's own state,
// or off the frame's path (the output's own goroutine, a page, a scrape,
// the clock, shutdown). A lock streams share on the path is not listed: it
// calls shared.Taking just before, and TestOutputsShareNoLockAcrossStreams
// counts it.
var lockSites = map[string]string{
	"livelog: (*Log).throttle st.mu":           "stream",
	"tracing: (*Tracing).detectorState s.mu":   "stream",
	"tracing: (*Tracing).Tick s.mu":            "stream",
	"tracing: (*Tracing).endAllEpisodes s.mu":  "stream",
	"tracing: (*Tracing).References s.mu":      "stream",
	"tracing: (*Tracing).Shutdown s.mu":        "stream",
	"tracing: (*Tracing).TraceIDFor s.mu":      "stream",
	"tracing: (*Tracing).stream s.mu":          "stream",
	"tracing: (*Tracing).OnEvent s.mu":         "stream",
	"tracing: (*Tracing).streamOpened s.mu":    "stream",
	"tracing: (*Tracing).fullSync s.mu":        "stream",
	"tracing: (*Tracing).streamClosed s.mu":    "stream",
	"tracing: (*Tracing).pushEnded s.mu":       "stream",
	"tracing: (*Tracing).detector s.mu":        "stream",
	"tracing: (*spanObjects).take sh.mu":       "off the path: the span queue's goroutine",
	"retained: (*Store).Snapshot c.mu":         "off the path: CSDS",
	"retained: (*Store).do c.mu":               "off the path: the store's goroutine",
	"retained: (*Store).closeStream c.mu":      "off the path: the store's goroutine",
	"retained: (*Store).accept c.mu":           "off the path: the store's goroutine",
	"retained: (*Store).Handler c.mu":          "off the path: /debug/config",
	"upstream: (*Health).State u.mu":           "off the path: status and pages",
	"references: (*References).do r.mu":        "off the path: the check's goroutine",
	"references: (*References).ScanStats r.mu": "off the path: a scrape",
	"references: (*References).Dangling r.mu":  "off the path: pages and status",
	"references: (*References).Holds r.mu":     "off the path: tests of what the check holds",
}

// Every lock of the outputs' code is either listed in lockSites or said to
// the hook (shared.Taking) where it is taken: a new lock cannot join a
// frame's path unseen by TestOutputsShareNoLockAcrossStreams.
func TestEveryLockIsAccountedFor(t *testing.T) {
	leakcheck.Check(t)
	var files []string
	for _, pattern := range []string{"*.go", "*/*.go", "internal/*/*.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	fset := token.NewFileSet()
	seen := map[string]bool{}
	var unaccounted []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg := filepath.ToSlash(filepath.Dir(name))
		if pkg == "." {
			pkg = "export"
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			where := fn.Name.Name
			if fn.Recv != nil {
				where = "(" + string(src[fset.Position(fn.Recv.List[0].Type.Pos()).Offset:fset.Position(fn.Recv.List[0].Type.End()).Offset]) + ")." + where
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				var list []ast.Stmt
				switch b := n.(type) {
				case *ast.BlockStmt:
					list = b.List
				case *ast.CaseClause:
					list = b.Body
				case *ast.CommClause:
					list = b.Body
				}
				for i, s := range list {
					lock, ok := lockOf(s, src, fset)
					if !ok {
						continue
					}
					if i > 0 && callsTakingShared(list[i-1]) {
						continue
					}
					key := pkg + ": " + where + " " + lock
					seen[key] = true
					if _, ok := lockSites[key]; !ok {
						unaccounted = append(unaccounted, fset.Position(s.Pos()).String()+": "+key)
					}
				}
				return true
			})
		}
	}
	sort.Strings(unaccounted)
	for _, u := range unaccounted {
		t.Errorf("%s: a lock neither listed in lockSites (a stream's own, or off the frame's path) nor said to shared.Taking", u)
	}
	for key := range lockSites {
		if !seen[key] {
			t.Errorf("lockSites lists %q, which the code no longer takes", key)
		}
	}
}

// lockOf is the lock s takes, when s is x.Lock() or x.RLock().
func lockOf(s ast.Stmt, src []byte, fset *token.FileSet) (string, bool) {
	es, ok := s.(*ast.ExprStmt)
	if !ok {
		return "", false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return "", false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || (sel.Sel.Name != "Lock" && sel.Sel.Name != "RLock") {
		return "", false
	}
	return string(src[fset.Position(sel.X.Pos()).Offset:fset.Position(sel.X.End()).Offset]), true
}

func callsTakingShared(s ast.Stmt) bool {
	es, ok := s.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "shared" && sel.Sel.Name == "Taking"
}
