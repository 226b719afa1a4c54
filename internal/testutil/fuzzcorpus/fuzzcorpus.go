// Package fuzzcorpus hands codec's checked-in fuzz corpus to the fuzz targets of the packages that read what codec decodes.
package fuzzcorpus

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/adstap/adstap/codec"
)

// Frames returns the messages of codec's FuzzDecode corpus
// (codec/testdata/fuzz/FuzzDecode): real requests and responses of every
// kind the decoder reads, and the inputs that once broke it.
func Frames(tb testing.TB) [][]byte {
	tb.Helper()
	dir := filepath.Join(moduleRoot(tb), "codec", "testdata", "fuzz", "FuzzDecode")
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("codec's fuzz corpus in %s: %d files, %v", dir, len(files), err)
	}
	var frames [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		frame, err := parse(b)
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		frames = append(frames, frame)
	}
	return frames
}

// Resource is one resource of a corpus response: its type and its body.
type Resource struct {
	TypeURL string
	Body    []byte
}

// Resources returns the resources of the corpus frames that decode as
// responses, SotW or Delta, each body a copy.
func Resources(tb testing.TB) []Resource {
	tb.Helper()
	var out []Resource
	for _, frame := range Frames(tb) {
		for _, delta := range []bool{false, true} {
			var resp codec.Response
			if resp.Decode(frame, delta) != nil {
				continue
			}
			for _, r := range resp.Resources {
				if r.Heartbeat {
					continue
				}
				typeURL := string(r.TypeURL)
				if typeURL == "" {
					typeURL = resp.TypeURL
				}
				out = append(out, Resource{TypeURL: typeURL, Body: bytes.Clone(r.Body)})
			}
		}
	}
	return out
}

// parse reads a corpus file of one []byte argument ("go test fuzz v1").
func parse(b []byte) ([]byte, error) {
	header, rest, _ := strings.Cut(string(b), "\n")
	if header != "go test fuzz v1" {
		return nil, errors.New("not a go test fuzz v1 file")
	}
	arg := strings.TrimSpace(rest)
	lit, ok := strings.CutPrefix(arg, "[]byte(")
	if !ok || !strings.HasSuffix(lit, ")") {
		return nil, fmt.Errorf("want one []byte argument, have %.40q", arg)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
	return []byte(s), err
}

// moduleRoot is the first directory up from the test's with adstap's go.mod.
func moduleRoot(tb testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/adstap/adstap\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("fuzzcorpus: no adstap go.mod above the test's directory")
		}
		dir = parent
	}
}
