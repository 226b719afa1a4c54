package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// generalWords are short type names that are also plain words of other
// vocabularies (JSON fields, HTTP headers, a metric's overflow label): a
// literal of them elsewhere says nothing of a type.
var generalWords = []string{codec.ShortHealthInfo, codec.ShortAddress, codec.ShortAuthorization, codec.ShortTypeOther}

// TestTypeNamesAndDirectionsAreCodecs fails when a non-test file outside codec
// spells a short type name ("cds", "lds", ...) as a string literal: codec
// owns them (codec.ShortCluster, ...), so that what a package calls a type
// is what the metrics call it. The same for a direction ("request",
// "response": codec.Direction's String) in a package that ships; the
// support areas' are other requests (a pod's memory request).
func TestTypeNamesAndDirectionsAreCodecs(t *testing.T) {
	leakcheck.Check(t)
	var names []string
	for _, s := range codec.ShortTypes() {
		if !slices.Contains(generalWords, s) {
			names = append(names, s)
		}
	}
	if !slices.Contains(names, codec.ShortCluster) {
		t.Fatalf("codec.ShortTypes() = %v lacks %q", codec.ShortTypes(), codec.ShortCluster)
	}
	directions := []string{codec.DirectionRequest.String(), codec.DirectionResponse.String()}
	root, dirs := packages(t)
	fset := token.NewFileSet()
	for _, dir := range dirs {
		if dir == "codec" {
			continue
		}
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				pos := fset.Position(lit.Pos())
				rel, _ := filepath.Rel(root, pos.Filename)
				switch {
				case slices.Contains(names, s):
					t.Errorf("%s:%d: the short type name %q spelled out: use codec's constant", filepath.ToSlash(rel), pos.Line, s)
				case slices.Contains(directions, s) && !isSupport(dir):
					t.Errorf("%s:%d: the direction %q spelled out: use codec.Direction", filepath.ToSlash(rel), pos.Line, s)
				}
				return true
			})
		}
	}
}
