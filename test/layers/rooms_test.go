package layers

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// maxRoom is, for each package whose files are kept in layers, the most
// files one cycle of references between its files may hold today. A file
// refers to another when its code names a function, method, type, variable,
// constant or field the other declares; files that refer to each other,
// directly or round a loop, are one room in practice, read and changed
// together. The numbers only go down: when a change merges rooms the test
// fails and names the loop; when a change splits one, lower the number.
var maxRoom = map[string]int{
	"track":            0,
	"tap":              0,
	"internal/inspect": 0,
	"internal/replay":  0,
}

// fileGraph is the references between one package's non-test files.
type fileGraph struct {
	files []string                        // base names, sorted
	edges map[string]map[string]reference // from → to → the first reference, for the message
}

// reference is where a file names what another declares.
type reference struct {
	file      string
	line, col int
	name      string
}

func (r reference) String() string { return fmt.Sprintf("%s:%d names %s", r.file, r.line, r.name) }

func (r reference) before(o reference) bool {
	return r.line < o.line || r.line == o.line && r.col < o.col
}

// loader type-checks the module's packages from source, which is quick,
// and reads every other package's export data, which go list finds in the
// build cache (they change only with go.mod): a change to the module costs
// no compilation before the test can look at it.
type loader struct {
	root    string
	fset    *token.FileSet
	gc      types.Importer
	checked map[string]*types.Package
}

// newLoader finds the export data of what dirs import from outside the
// module, directly or not.
func newLoader(t *testing.T, root string, dirs []string) *loader {
	t.Helper()
	gobin := filepath.Join(build.Default.GOROOT, "bin", "go")
	run := func(args ...string) string {
		cmd := exec.Command(gobin, args...)
		cmd.Dir = root
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	var pkgs []string
	for _, dir := range dirs {
		pkgs = append(pkgs, "./"+dir)
	}
	exports := map[string]string{}
	if len(pkgs) > 0 { // else nothing is imported (the test's own package)
		var external []string
		for path := range strings.FieldsSeq(run(append([]string{"list", "-deps", "-f", "{{if not .Module}}{{.ImportPath}}{{else if ne .Module.Path \"" + strings.TrimSuffix(module, "/") + "\"}}{{.ImportPath}}{{end}}"}, pkgs...)...)) {
			if path != "unsafe" && path != "C" {
				external = append(external, path)
			}
		}
		for line := range strings.Lines(run(append([]string{"list", "-export", "-f", "{{.ImportPath}} {{.Export}}"}, external...)...)) {
			if path, export, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				exports[path] = export
			}
		}
	}
	l := &loader{root: root, fset: token.NewFileSet(), checked: map[string]*types.Package{}}
	l.gc = importer.ForCompiler(l.fset, "gc", func(path string) (io.ReadCloser, error) {
		export, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(export)
	})
	return l
}

// Import is the type checker's: the module's packages from source, the
// rest from export data.
func (l *loader) Import(path string) (*types.Package, error) {
	dir, ok := strings.CutPrefix(path, module)
	if !ok {
		return l.gc.Import(path)
	}
	if pkg, ok := l.checked[path]; ok {
		return pkg, nil
	}
	pkg, _, err := l.check(dir, nil)
	l.checked[path] = pkg
	return pkg, err
}

// check type-checks dir's non-test files for this platform.
func (l *loader) check(dir string, info *types.Info) (*types.Package, []string, error) {
	bp, err := build.Default.ImportDir(filepath.Join(l.root, dir), 0)
	if err != nil {
		return nil, nil, err
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(l.fset, filepath.Join(bp.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	// A dependency is checked for its declarations alone: only the
	// packages the test looks at need their bodies read.
	conf := types.Config{Importer: l, IgnoreFuncBodies: info == nil}
	pkg, err := conf.Check(module+dir, l.fset, files, info)
	return pkg, bp.GoFiles, err
}

// references returns which of dir's non-test files refers to which.
func (l *loader) references(t *testing.T, dir string) fileGraph {
	t.Helper()
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, names, err := l.check(dir, info)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	fset := l.fset
	g := fileGraph{files: slices.Sorted(slices.Values(names)), edges: map[string]map[string]reference{}}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		switch obj.(type) {
		case *types.Func, *types.TypeName, *types.Var, *types.Const:
		default:
			continue
		}
		if v, ok := obj.(*types.Var); ok && !v.IsField() && v.Parent() != pkg.Scope() {
			continue // a local variable or parameter
		}
		if tn, ok := obj.(*types.TypeName); ok && tn.Parent() != pkg.Scope() {
			continue // a local type or a type parameter
		}
		from, to := fset.Position(id.Pos()), fset.Position(obj.Pos())
		a, b := filepath.Base(from.Filename), filepath.Base(to.Filename)
		if a == b {
			continue
		}
		if g.edges[a] == nil {
			g.edges[a] = map[string]reference{}
		}
		ref := reference{file: a, line: from.Line, col: from.Column, name: id.Name}
		if old, ok := g.edges[a][b]; !ok || ref.before(old) {
			g.edges[a][b] = ref
		}
	}
	return g
}

// rooms returns the strongly connected components of g (Tarjan's), each
// sorted, largest first.
func (g fileGraph) rooms() [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range g.next(v, g.files) {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var room []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				room = append(room, w)
				if w == v {
					break
				}
			}
			slices.Sort(room)
			out = append(out, room)
		}
	}
	for _, f := range g.files {
		if _, seen := index[f]; !seen {
			visit(f)
		}
	}
	slices.SortStableFunc(out, func(a, b []string) int { return len(b) - len(a) })
	return out
}

// backEdge returns the edge of room whose removal leaves the smallest
// loop: the reference that most likely points the wrong way, which the
// message names first.
func (g fileGraph) backEdge(room []string) (from, to string) {
	best := len(room) + 1
	for _, a := range room {
		for _, b := range g.next(a, room) {
			ref := g.edges[a][b]
			delete(g.edges[a], b)
			size := len(g.rooms()[0])
			g.edges[a][b] = ref
			if size < best {
				best, from, to = size, a, b
			}
		}
	}
	return from, to
}

// loop returns a shortest loop through the edge from → to of room, each
// step with the reference that makes it, the edge first.
func (g fileGraph) loop(room []string, from, to string) []string {
	prev := map[string]string{to: ""}
	queue := []string{to}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		if v == from {
			break
		}
		for _, w := range g.next(v, room) {
			if _, seen := prev[w]; !seen {
				prev[w] = v
				queue = append(queue, w)
			}
		}
	}
	back := []string{from} // from, back to to
	for at := from; at != to; {
		at = prev[at]
		back = append(back, at)
	}
	slices.Reverse(back)
	path := append([]string{from}, back...)
	var steps []string
	for i := range len(path) - 1 {
		steps = append(steps, fmt.Sprintf("%s → %s (%s)", path[i], path[i+1], g.edges[path[i]][path[i+1]]))
	}
	return steps
}

// next returns the files of room that v refers to, sorted.
func (g fileGraph) next(v string, room []string) []string {
	var out []string
	for w := range g.edges[v] {
		if slices.Contains(room, w) {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}

// TestFilesCallDown keeps the files of track, tap, internal/inspect and
// internal/replay in layers: a file may use what the files below it declare, and a file below
// does not reach back up. maxRoom bounds the cycles left.
func TestFilesCallDown(t *testing.T) {
	leakcheck.Check(t)
	root, _ := packages(t)
	dirs := slices.Sorted(maps.Keys(maxRoom))
	l := newLoader(t, root, dirs)
	for _, dir := range dirs {
		g := l.references(t, dir)
		rooms := g.rooms()
		largest := rooms[0]
		size := len(largest)
		if size == 1 {
			size = 0 // no cycle at all
		}
		switch limit := maxRoom[dir]; {
		case size > limit:
			from, to := g.backEdge(largest)
			t.Errorf("%s: %d files refer to each other round a loop, more than the %d allowed: %s\nthe reference back up is most likely %s → %s (%s), in the loop:\n\t%s\nmove what the lower file needs down to it, or pass it in, so that files call down",
				dir, size, limit, strings.Join(largest, " "), from, to, g.edges[from][to], strings.Join(g.loop(largest, from, to), "\n\t"))
		case size < limit:
			t.Errorf("%s: its largest loop of files is down to %d (%s); lower maxRoom[%q] from %d to %d", dir, size, strings.Join(largest, " "), dir, limit, size)
		case size == 0:
			t.Logf("%s: no loop of files: every file calls down", dir)
		default:
			t.Logf("%s: largest loop of files %d: %s", dir, size, strings.Join(largest, " "))
		}
	}
}

// TestFilesCallDownSeesALoop checks the check itself on a package of three
// files, two of which refer to each other.
func TestFilesCallDownSeesALoop(t *testing.T) {
	leakcheck.Check(t)
	root, _ := packages(t)
	const dir = "test/layers/testdata/loop"
	g := newLoader(t, root, nil).references(t, dir)
	rooms := g.rooms()
	if got, want := rooms[0], []string{"a.go", "b.go"}; !slices.Equal(got, want) {
		t.Fatalf("largest loop %v, want %v (edges %v)", got, want, g.edges)
	}
	if len(rooms) != 2 || len(rooms[1]) != 1 || rooms[1][0] != "top.go" {
		t.Errorf("rooms %v: top.go calls down and is in no loop", rooms)
	}
	from, to := g.backEdge(rooms[0])
	if loop := g.loop(rooms[0], from, to); len(loop) != 2 {
		t.Errorf("loop through %s → %s: %v", from, to, loop)
	}
}
