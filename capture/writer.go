package capture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Writer appends records to a capture file: a JSON object on a line, and
// after the line of a frame its message, raw, as long as the line says
// (format 2, docs/capture.md). A record goes to the file as it is encoded,
// its message from the pieces it is handed in, through a small buffer that
// is written out at the end of each record: a message is never whole in
// memory twice, and a crash leaves every record before the last complete
// (the reader recognizes a last one cut short). When the file passes
// MaxBytes it is rotated: PATH becomes PATH.1, PATH.1 becomes PATH.2, and so
// on up to MaxFiles files in all.
type Writer struct {
	path     string
	maxBytes int64
	maxFiles int
	header   Record

	mu   sync.Mutex
	f    *os.File
	bw   *bufio.Writer
	line bytes.Buffer // a record's line, encoded
	enc  *json.Encoder
	size int64
	open map[uint64]Record // streams open now, repeated at the top of each new file
	err  error
	one  [1][]byte
}

// bufferSize is how much of a record the writer gathers before a write.
const bufferSize = 64 << 10

// Defaults for NewWriter's zero limits.
const (
	DefaultMaxBytes = 100 << 20
	DefaultMaxFiles = 5
)

// NewWriter creates (or truncates) path and writes its first record.
func NewWriter(path string, maxBytes int64, maxFiles int, adstapVersion, upstream string) (*Writer, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if maxFiles <= 0 {
		maxFiles = DefaultMaxFiles
	}
	w := &Writer{
		path: path, maxBytes: maxBytes, maxFiles: maxFiles, open: map[uint64]Record{},
		header: Record{Kind: KindCapture, Format: FormatVersion, Adstap: adstapVersion, Upstream: upstream},
	}
	w.enc = json.NewEncoder(&w.line)
	if err := w.startFile(); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) startFile() error {
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("opening capture file: %w", err)
	}
	w.f, w.size = f, 0
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(f, bufferSize)
	} else {
		w.bw.Reset(f)
	}
	h := w.header
	h.Time = time.Now()
	if err := w.writeLocked(h, nil); err != nil {
		return err
	}
	for _, r := range w.open {
		r.Reopened = true
		if err := w.writeLocked(r, nil); err != nil {
			return err
		}
	}
	return nil
}

// Write appends r, rotating first if the file is full; a frame's Message
// is written after its line. After a write error the writer stops, and
// every later Write returns that error: capturing must never stop the tap.
func (w *Writer) Write(r Record) error {
	w.one[0] = r.Message
	defer func() { w.one[0] = nil }()
	msg := w.one[:]
	if r.Message == nil {
		msg = nil
	}
	return w.WriteFrame(r, msg)
}

// WriteFrame is Write for a record whose message is the pieces msg, in
// order (r.Message is not read): each piece goes to the file as it is, so
// a message received in pieces is never put together in memory.
func (w *Writer) WriteFrame(r Record, msg [][]byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	switch r.Kind {
	case KindOpen:
		w.open[r.Stream] = r
	case KindClose:
		delete(w.open, r.Stream)
	}
	if w.size >= w.maxBytes {
		if err := w.rotate(); err != nil {
			w.err = err
			return err
		}
	}
	if err := w.writeLocked(r, msg); err != nil {
		w.err = err
		return err
	}
	return nil
}

// writeLocked writes r's line, then msg and a newline when there is a
// message, and hands it all to the file.
func (w *Writer) writeLocked(r Record, msg [][]byte) error {
	n := 0
	for _, p := range msg {
		n += len(p)
	}
	r.Message = nil
	w.line.Reset()
	if err := w.enc.Encode(line{Record: r, Len: n}); err != nil { // with its newline
		return fmt.Errorf("encoding a capture record: %w", err)
	}
	w.bw.Write(w.line.Bytes())
	w.size += int64(w.line.Len())
	if n > 0 {
		for _, p := range msg {
			w.bw.Write(p)
		}
		w.bw.WriteByte('\n')
		w.size += int64(n) + 1
	}
	if w.line.Cap() > bufferSize {
		w.line = bytes.Buffer{} // a rare huge line (headers) is not kept
		w.enc = json.NewEncoder(&w.line)
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("writing capture file %s: %w", w.path, err)
	}
	return nil
}

func (w *Writer) rotate() error {
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("closing capture file: %w", err)
	}
	os.Remove(rotated(w.path, w.maxFiles-1))
	for i := w.maxFiles - 2; i >= 1; i-- {
		if err := os.Rename(rotated(w.path, i), rotated(w.path, i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotating capture files: %w", err)
		}
	}
	if w.maxFiles > 1 {
		if err := os.Rename(w.path, rotated(w.path, 1)); err != nil {
			return fmt.Errorf("rotating capture files: %w", err)
		}
	}
	return w.startFile()
}

func rotated(path string, i int) string {
	if i == 0 {
		return path
	}
	return fmt.Sprintf("%s.%d", path, i)
}

// Files lists the capture's files, oldest first, as inspect reads them.
func Files(path string, maxFiles int) []string {
	var out []string
	for i := maxFiles - 1; i >= 0; i-- {
		if _, err := os.Stat(rotated(path, i)); err == nil {
			out = append(out, rotated(path, i))
		}
	}
	return out
}

// Close closes the current file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if w.err == nil {
		w.err = errors.New("capture closed")
	}
	return err
}

// Files lists this writer's files, oldest first: the rotated ones, then the
// one being written.
func (w *Writer) Files() []string { return Files(w.path, w.maxFiles) }
