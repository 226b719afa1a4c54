package capture_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
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
		// A file rotates before the record that would take it past its bound.
		if fi.Size() > maxBytes {
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

// someRecords are records of every kind; the frames' messages hold
// newlines, braces and every byte value, as protobuf messages do.
func someRecords() []capture.Record {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	binary := make([]byte, 600)
	for i := range binary {
		binary[i] = byte(i)
	}
	return []capture.Record{
		{Time: at, Kind: capture.KindOpen, Stream: 1, Conn: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
			Protocol: "sotw", Peer: "127.0.0.1:4000", Headers: map[string][]string{"user-agent": {"grpc-go"}}},
		{Time: at.Add(1), Kind: capture.KindFrame, Stream: 1, Direction: "request", Node: "sidecar~a", TypeURL: "type.googleapis.com/envoy.config.cluster.v3.Cluster", Size: 3, Message: []byte("\n{\n")},
		{Time: at.Add(2), Kind: capture.KindFrame, Stream: 1, Direction: "response", Size: 700, Message: binary, Redacted: true},
		{Time: at.Add(3), Kind: capture.KindFrame, Stream: 1, Direction: "request", Size: 0},                  // an empty message
		{Time: at.Add(4), Kind: capture.KindFrame, Stream: 1, Direction: "response", Size: 9, Redacted: true}, // left out: could not be redacted
		{Time: at.Add(5), Kind: capture.KindGap, Stream: 1, Skipped: 3},
		{Time: at.Add(6), Kind: capture.KindClose, Stream: 1, Code: "Canceled", StatusMessage: "context canceled"},
	}
}

// TestRecordsReadBackAsWritten: every record reads back as it was
// written, in either format: the current one, and JSON Lines with the
// messages in base64 (format 1), as captures taken before it are.
func TestRecordsReadBackAsWritten(t *testing.T) {
	leakcheck.Check(t)
	want := someRecords()
	path := filepath.Join(t.TempDir(), "xds.capture")
	w, err := capture.NewWriter(path, 0, 0, "test", "cp")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range want {
		if i == 2 { // in pieces, as the capture hands a frame over
			m := r.Message
			r.Message = nil
			err = w.WriteFrame(r, [][]byte{m[:1], m[1:300], nil, m[300:]})
		} else {
			err = w.Write(r)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	var format1 bytes.Buffer
	for _, r := range append([]capture.Record{{Time: want[0].Time, Kind: capture.KindCapture, Format: 1, Adstap: "old", Upstream: "cp"}}, want...) {
		b, _ := json.Marshal(r)
		format1.Write(append(b, '\n'))
	}
	old := filepath.Join(t.TempDir(), "old.capture")
	os.WriteFile(old, format1.Bytes(), 0o600)

	for _, file := range []string{path, old} {
		got, err := readAll(t, file)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(got) == 0 || got[0].Kind != capture.KindCapture {
			t.Fatalf("%s: no capture record first: %+v", file, got)
		}
		if diff := cmp.Diff(want, got[1:], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (format %d) reads back otherwise (-written +read):\n%s", file, got[0].Format, diff)
		}
	}
	if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(`"msg"`)) || !bytes.Contains(b, want[2].Message) {
		t.Error("the current format holds a message otherwise than raw after its line")
	}
}

// growing is a file being written: Read hands out what was written so far.
type growing struct {
	data []byte
	n    int // written so far
	pos  int
}

func (g *growing) Read(p []byte) (int, error) {
	if g.pos == g.n {
		return 0, io.EOF
	}
	k := copy(p, g.data[g.pos:g.n])
	g.pos += k
	return k, nil
}

// TestAReaderGoesOnOnceTheRecordIsComplete: a reader that met the end of a
// file in the middle of a record, or between two, reads on from there once
// the writer wrote more — wherever the write stopped.
func TestAReaderGoesOnOnceTheRecordIsComplete(t *testing.T) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "xds.capture")
	w, err := capture.NewWriter(path, 0, 0, "test", "cp")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range someRecords() {
		w.Write(r)
	}
	w.Close()
	data, _ := os.ReadFile(path)
	whole, err := readAll(t, path)
	if err != nil {
		t.Fatal(err)
	}
	for step := 1; step < 200; step += 13 {
		g := &growing{data: data}
		rd := capture.NewReader(g, "live")
		var got []capture.Record
		for g.n < len(data) || len(got) < len(whole) {
			r, err := rd.Next()
			switch {
			case err == nil:
				got = append(got, r)
			case err == io.EOF || errors.Is(err, capture.ErrIncomplete):
				if g.n == len(data) {
					t.Fatalf("step %d: %v with the whole file written, after %d records", step, err, len(got))
				}
				g.n = min(len(data), g.n+step)
			default:
				t.Fatalf("step %d, %d bytes written: %v", step, g.n, err)
			}
		}
		if diff := cmp.Diff(whole, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("step %d: read otherwise than at once (-at once +as written):\n%s", step, diff)
		}
	}
}

// TestAMessageNotFollowedByANewlineIsAnError: a line that announces more
// bytes than its message has is found out, not read as garbage records.
func TestAMessageNotFollowedByANewlineIsAnError(t *testing.T) {
	leakcheck.Check(t)
	in := `{"time":"2026-11-30T09:00:00Z","kind":"capture","format":2}` + "\n" +
		`{"time":"2026-11-30T09:00:01Z","kind":"frame","stream":1,"dir":"request","len":2}` + "\nabc\n"
	rd := capture.NewReader(strings.NewReader(in), "bad")
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(); err == nil || !strings.Contains(err.Error(), "not followed by a newline") {
		t.Errorf("err = %v, want the message said not followed by a newline", err)
	}
}

// TestAPushLargerThanAFileStaysWithinAllTheFiles: a frame larger than a
// file (a 40 MB push, files of 32 MiB) is written whole to a file of its
// own, and the oldest files make room for it, so the files never take more
// than all of them may; a frame larger than that is a gap with its size.
func TestAPushLargerThanAFileStaysWithinAllTheFiles(t *testing.T) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "xds.capture")
	const maxBytes, maxFiles = 4096, 3
	w, err := capture.NewWriter(path, maxBytes, maxFiles, "test", "cp")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	w.Write(capture.Record{Time: at, Kind: capture.KindOpen, Stream: 1, Method: "/m"})
	small := capture.Record{Time: at, Kind: capture.KindFrame, Stream: 1, Direction: "request", Message: make([]byte, 300)}
	for range 40 {
		w.Write(small)
	}
	push := bytes.Repeat([]byte{'p'}, 2*maxBytes)
	if err := w.WriteFrame(capture.Record{Time: at, Kind: capture.KindFrame, Stream: 1, Direction: "response"}, [][]byte{push[:100], push[100:]}); err != nil {
		t.Fatal(err)
	}
	huge := capture.Record{Time: at, Kind: capture.KindFrame, Stream: 1, Direction: "response", Message: make([]byte, maxFiles*maxBytes)}
	if err := w.Write(huge); err != nil {
		t.Fatal(err)
	}
	w.Write(small)
	w.Close()
	var total int64
	var recs []capture.Record
	for _, f := range capture.Files(path, maxFiles) {
		fi, _ := os.Stat(f)
		total += fi.Size()
		got, err := readAll(t, f)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, got...)
	}
	if total > maxBytes*maxFiles {
		t.Errorf("the files take %d bytes, more than %d × %d", total, maxFiles, maxBytes)
	}
	var pushed, gap bool
	for _, r := range recs {
		pushed = pushed || bytes.Equal(r.Message, push)
		gap = gap || (r.Kind == capture.KindGap && r.Skipped == 1 && r.SkippedBytes == len(huge.Message))
	}
	if !pushed || !gap {
		t.Errorf("the push written whole %v, the frame larger than all the files said as a gap %v", pushed, gap)
	}
}
