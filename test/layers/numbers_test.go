package layers

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The architecture page's table of numbers sits between these markers;
// ARCH_UPDATE=1 rewrites it from the code.
const (
	numbersBegin = "<!-- BEGIN package numbers: ARCH_UPDATE=1 go test ./test/layers -run TestArchitecturePageNumbers rewrites it -->"
	numbersEnd   = "<!-- END package numbers -->"
)

// packageNumbers is what the page says of one package that ships.
type packageNumbers struct {
	dir      string
	files    int // non-test Go files, any build tag
	lines    int
	exported int // exported top-level names and exported methods of exported types
}

// shippedNumbers counts every package that ships.
func shippedNumbers(t *testing.T) []packageNumbers {
	t.Helper()
	root, dirs := packages(t)
	var out []packageNumbers
	for _, dir := range dirs {
		if isSupport(dir) {
			continue
		}
		n := packageNumbers{dir: dir}
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			n.files++
			n.lines += bytes.Count(src, []byte("\n"))
			n.exported += exportedNames(file)
		}
		if n.files > 0 {
			out = append(out, n)
		}
	}
	return out
}

// exportedNames counts the exported names a file declares: top-level
// functions, types, variables and constants, and the exported methods of
// exported types.
func exportedNames(f *ast.File) int {
	n := 0
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || receiverExported(d.Recv.List[0].Type) {
				n++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

func receiverExported(e ast.Expr) bool {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// roundLines is how the page states a package's lines: to the nearest 50,
// exact below 100, so that the table says how big a room is without changing on every
// commit.
func roundLines(n int) int {
	if n < 100 {
		return n
	}
	return int(math.Round(float64(n)/50) * 50)
}

func numbersTable(ns []packageNumbers) string {
	var b strings.Builder
	files, lines, exported := 0, 0, 0
	b.WriteString("| package | files | lines (±50) | exported names |\n|---|---:|---:|---:|\n")
	for _, n := range ns {
		fmt.Fprintf(&b, "| `%s` | %d | %d | %d |\n", n.dir, n.files, roundLines(n.lines), n.exported)
		files, lines, exported = files+n.files, lines+n.lines, exported+n.exported
	}
	fmt.Fprintf(&b, "| **%d packages** | %d | %d | %d |\n", len(ns), files, roundLines(lines), exported)
	return b.String()
}

var numbersRow = regexp.MustCompile("^\\| `([^`]+)` \\| (\\d+) \\| (\\d+) \\| (\\d+) \\|$")

// TestArchitecturePageNumbers keeps the numbers docs/architecture.md gives
// for each package that ships true to the code: its files and exported
// names exactly, its lines within 10 %, and no package missing or extra.
func TestArchitecturePageNumbers(t *testing.T) {
	root, _ := packages(t)
	page := filepath.Join(root, "docs", "architecture.md")
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(doc), numbersBegin)
	if !ok {
		t.Fatalf("%s: no %q", page, numbersBegin)
	}
	table, after, ok := strings.Cut(rest, numbersEnd)
	if !ok {
		t.Fatalf("%s: no %q", page, numbersEnd)
	}
	got := shippedNumbers(t)
	if os.Getenv("ARCH_UPDATE") == "1" {
		out := before + numbersBegin + "\n" + numbersTable(got) + numbersEnd + after
		if err := os.WriteFile(page, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	stated := map[string]packageNumbers{}
	for _, line := range strings.Split(table, "\n") {
		m := numbersRow.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		files, _ := strconv.Atoi(m[2])
		lines, _ := strconv.Atoi(m[3])
		exported, _ := strconv.Atoi(m[4])
		stated[m[1]] = packageNumbers{dir: m[1], files: files, lines: lines, exported: exported}
	}
	for _, n := range got {
		s, ok := stated[n.dir]
		delete(stated, n.dir)
		switch {
		case !ok:
			t.Errorf("%s is not in the page's table of numbers", n.dir)
		case s.files != n.files || s.exported != n.exported:
			t.Errorf("%s: the page says %d files and %d exported names, the code has %d and %d", n.dir, s.files, s.exported, n.files, n.exported)
		case math.Abs(float64(s.lines-n.lines)) > 0.1*float64(n.lines)+50:
			t.Errorf("%s: the page says %d lines, the code has %d", n.dir, s.lines, n.lines)
		}
	}
	for dir := range stated {
		t.Errorf("the page's table of numbers names %s, which does not ship (or does not exist)", dir)
	}
	if t.Failed() {
		t.Log("ARCH_UPDATE=1 go test ./test/layers -run TestArchitecturePageNumbers rewrites the table")
	}
}
