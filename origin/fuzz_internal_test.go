package origin

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/internal/testutil/fuzzcorpus"
)

// FuzzStamped feeds the scanner of Istio objects any bytes, from codec's
// fuzz corpus: as a resource body, and as a whole response, SotW and Delta.
// It must not panic, and what it finds must be there: each object's path is
// in the bytes, once, and at most maxChanged of them, Truncated saying when
// there were more.
func FuzzStamped(f *testing.F) {
	for _, frame := range fuzzcorpus.Frames(f) {
		f.Add(frame)
	}
	for _, r := range fuzzcorpus.Resources(f) {
		f.Add(r.Body)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(how string, s Stamped) {
			t.Helper()
			if len(s.Objects) > maxChanged || (s.Truncated && len(s.Objects) != maxChanged) {
				t.Fatalf("%s: %d objects, truncated %v (at most %d)", how, len(s.Objects), s.Truncated, maxChanged)
			}
			seen := map[string]bool{}
			for _, o := range s.Objects {
				if !bytes.Contains(data, []byte(o.Path)) {
					t.Fatalf("%s: object %q is not in the bytes", how, o.Path)
				}
				if seen[o.Path] {
					t.Fatalf("%s: object %q found twice", how, o.Path)
				}
				seen[o.Path] = true
			}
		}
		var body Stamped
		body.scan(data, nil)
		check("as a body", body)
		var sc Scanner
		for _, delta := range []bool{false, true} {
			check("as a response", sc.stampedIn(mem.BufferSlice{mem.SliceBuffer(data)}, delta, func(int) bool { return false }))
		}
	})
}
