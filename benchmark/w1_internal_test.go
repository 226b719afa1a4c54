package benchmark

import (
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// TestW1BodiesDifferInTwoPercent: W1 claims its two alternating bodies
// differ in 2 % of the clusters, as a control plane's consecutive pushes
// would; a resource marshalled with its map entries in another order would
// look changed to the tracker although it is not.
func TestW1BodiesDifferInTwoPercent(t *testing.T) {
	leakcheck.Check(t)
	s := TinySizes()
	s.W1Clusters, s.W1Pushes = 500, 2
	w := NewW1(s)
	var a, b codec.Response
	if err := a.Decode(w.pushes[1].Bytes(), false); err != nil {
		t.Fatal(err)
	}
	if err := b.Decode(w.pushes[2].Bytes(), false); err != nil {
		t.Fatal(err)
	}
	if len(a.Resources) != s.W1Clusters || len(b.Resources) != s.W1Clusters {
		t.Fatalf("pushes carry %d and %d clusters, want %d", len(a.Resources), len(b.Resources), s.W1Clusters)
	}
	changed := 0
	for i := range a.Resources {
		if string(a.Resources[i].Name) != string(b.Resources[i].Name) {
			t.Fatalf("resource %d is %q in one push and %q in the other", i, a.Resources[i].Name, b.Resources[i].Name)
		}
		if a.Resources[i].Hash != b.Resources[i].Hash {
			changed++
		}
	}
	if got, want := changed, s.W1Clusters/50; got != want {
		t.Errorf("%d of %d clusters differ between the bodies, want %d (2 %%)", got, s.W1Clusters, want)
	}
}
