package capture

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Writer appends records to a capture file, one JSON object per line, each
// written with a single write so a crash leaves every complete line
// readable. When the file passes MaxBytes it is rotated: PATH becomes PATH.1,
// PATH.1 becomes PATH.2, and so on up to MaxFiles files in all.
type Writer struct {
	path     string
	maxBytes int64
	maxFiles int
	header   Record

	mu   sync.Mutex
	f    *os.File
	size int64
	open map[uint64]Record // streams open now, repeated at the top of each new file
	err  error
}

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
	h := w.header
	h.Time = time.Now()
	if err := w.writeLocked(h); err != nil {
		return err
	}
	for _, r := range w.open {
		r.Reopened = true
		if err := w.writeLocked(r); err != nil {
			return err
		}
	}
	return nil
}

// Write appends r, rotating first if the file is full. After a write error
// the writer stops, and every later Write returns that error: capturing
// must never stop the tap.
func (w *Writer) Write(r Record) error {
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
	if err := w.writeLocked(r); err != nil {
		w.err = err
		return err
	}
	return nil
}

func (w *Writer) writeLocked(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding a capture record: %w", err)
	}
	b = append(b, '\n')
	n, err := w.f.Write(b)
	w.size += int64(n)
	if err != nil {
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
