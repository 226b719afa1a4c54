package redact_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/fuzzcorpus"
	"github.com/adstap/adstap/redact"
)

// fuzzTypes are types whose resources can carry secrets, and one with none.
var fuzzTypes = []string{codec.TypeSecret, codec.TypeCluster, codec.TypeListener, codec.TypeRoute, codec.TypeEndpoint}

// FuzzResource feeds the redactor's protowire scanner any bytes as a
// resource of each type, from codec's fuzz corpus. It must not panic; what
// it returns is its own, or the input itself when nothing was secret; and
// redacting what it returned finds nothing more to redact and changes
// nothing: a secret is never left behind for a second pass to find.
func FuzzResource(f *testing.F) {
	for _, r := range fuzzcorpus.Resources(f) {
		if i := slices.Index(fuzzTypes, r.TypeURL); i >= 0 {
			f.Add(uint8(i), r.Body)
		}
	}
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, typ uint8, body []byte) {
		typeURL := fuzzTypes[int(typ)%len(fuzzTypes)]
		in := bytes.Clone(body)
		out, redacted, err := redact.Resource(typeURL, in)
		if !bytes.Equal(in, body) {
			t.Fatalf("%s: redacting changed its input", typeURL)
		}
		if err != nil {
			return
		}
		if !redacted && !bytes.Equal(out, body) {
			t.Fatalf("%s: nothing redacted, yet the output differs from the input", typeURL)
		}
		again, more, err := redact.Resource(typeURL, out)
		switch {
		case err != nil:
			t.Fatalf("%s: the redacted resource does not read again: %v", typeURL, err)
		case more:
			t.Fatalf("%s: redacting the redacted resource found more secrets", typeURL)
		case !bytes.Equal(again, out):
			t.Fatalf("%s: redacting the redacted resource changed it", typeURL)
		}
	})
}
