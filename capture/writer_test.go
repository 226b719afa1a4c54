package capture_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/internal/leakcheck"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readAll(t *testing.T, path string) ([]capture.Record, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := capture.NewReader(f, filepath.Base(path))
	var out []capture.Record
	for {
		r, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

func TestRotationKeepsTheSizeBoundAndEachFileReadable(t *testing.T) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "xds.capture")
	const maxBytes, maxFiles = 4096, 3
	w, err := capture.NewWriter(path, maxBytes, maxFiles, "test", "istiod:15012")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	w.Write(capture.Record{Time: now, Kind: capture.KindOpen, Stream: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"})
	frame := capture.Record{Kind: capture.KindFrame, Stream: 1, Direction: "response", Message: make([]byte, 300)}
	for i := 0; i < 200; i++ {
		frame.Time = now.Add(time.Duration(i) * time.Millisecond)
		if err := w.Write(frame); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	files := capture.Files(path, maxFiles)
	if len(files) != maxFiles {
		t.Fatalf("files %v, want %d", files, maxFiles)
	}
	for _, f := range files {
		fi, _ := os.Stat(f)
		// A file passes its bound by at most the record that crossed it.
		if fi.Size() > maxBytes+600 {
			t.Errorf("%s is %d bytes, bound %d", f, fi.Size(), maxBytes)
		}
		recs, err := readAll(t, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if recs[0].Kind != capture.KindCapture || recs[0].Format != capture.FormatVersion {
			t.Errorf("%s starts with %+v, want the capture header", f, recs[0])
		}
		if recs[1].Kind != capture.KindOpen || recs[1].Stream != 1 {
			t.Errorf("%s does not say which streams are open: %+v", f, recs[1])
		}
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file past --capture-max-files was kept: %v", err)
	}
}

func TestATruncatedFileReadsUpToItsLastCompleteRecord(t *testing.T) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "cut.capture")
	w, err := capture.NewWriter(path, 0, 0, "test", "cp")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		w.Write(capture.Record{Time: time.Now(), Kind: capture.KindFrame, Stream: 1, Direction: "request", Message: []byte("abc")})
	}
	w.Close()
	b, _ := os.ReadFile(path)
	os.WriteFile(path, b[:len(b)-7], 0o600) // a kill in the middle of the last write
	recs, err := readAll(t, path)
	if !errors.Is(err, capture.ErrIncomplete) || !strings.Contains(err.Error(), "after 5 complete records") {
		t.Errorf("err = %v, want ErrIncomplete after 5 complete records", err)
	}
	if len(recs) != 5 {
		t.Errorf("read %d records, want the header and 4 frames", len(recs))
	}
}
