package refgraph_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/fuzzcorpus"
	"github.com/adstap/adstap/refgraph"
)

// fuzzTypes are the types the graph reads, by the fuzzer's index.
var fuzzTypes = []string{codec.TypeCluster, codec.TypeListener, codec.TypeRoute, codec.TypeEndpoint, codec.TypeSecret}

// FuzzAccepted feeds the graph's protowire scanners any bytes as the body of
// an accepted resource of each type it reads, from codec's fuzz corpus. It
// must not panic; the resource is held by its name whatever its body says
// (what cannot be read is kept by name); accepting the same push again
// changes nothing; and the graph keeps nothing of the body's bytes, which
// are not to be read once the push is let go of.
func FuzzAccepted(f *testing.F) {
	for _, r := range fuzzcorpus.Resources(f) {
		if i := slices.Index(fuzzTypes, r.TypeURL); i >= 0 {
			f.Add(uint8(i), r.Body)
		}
	}
	f.Add(uint8(0), []byte{})
	at := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		typeURL := fuzzTypes[int(typ)%len(fuzzTypes)]
		for _, delta := range []bool{false, true} {
			g := refgraph.New(delta, time.Second)
			own := bytes.Clone(body)
			g.Accepted(push(typeURL, []refgraph.Resource{{Name: "r", Body: own}}, nil, false), at, 1)
			if !g.Holds(typeURL, "r") {
				t.Fatalf("%s (delta %v): the graph does not hold the resource it accepted", typeURL, delta)
			}
			before := g.Findings()
			for i := range own {
				own[i] ^= 0xff // the push let go of: its bytes reused
			}
			if after := g.Findings(); !slices.EqualFunc(before, after, sameFinding) {
				t.Fatalf("%s (delta %v): the findings changed with the bytes of a push let go of:\nbefore %v\nafter  %v", typeURL, delta, before, after)
			}
			if again := g.Accepted(push(typeURL, []refgraph.Resource{{Name: "r", Body: bytes.Clone(body)}}, nil, false), at, 2); len(again) != 0 {
				t.Fatalf("%s (delta %v): accepting the same push again changed %v", typeURL, delta, again)
			}
		}
	})
}

func sameFinding(a, b refgraph.Finding) bool { return a == b }
