package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/track"
)

// fileRead is one file as it was read.
type fileRead struct {
	Name    string
	Records int
	// Truncated is set when the file ended in a record cut short (a crash
	// or kill of the writer, or a copy of a file being written).
	Truncated bool
	Header    capture.Record // the file's first record (kind capture)
}

// source is a file to read, opened: once open, a rotation that renames it
// does not matter.
type source struct {
	name string
	f    *os.File
	// fresh: the newest file of a rotated set had no complete first record
	// when it was opened; the writer has just created it.
	fresh bool
}

func closeAll(srcs []source) {
	for _, s := range srcs {
		s.f.Close()
	}
}

// openFiles opens the files to read, in the order given. A single path
// whose rotated siblings exist (PATH.1, PATH.2, ... as capture.Writer leaves
// them) stands for the whole set, oldest first.
func openFiles(names []string) ([]source, error) {
	if len(names) == 0 {
		return nil, inputErrorf("no capture file given")
	}
	for _, n := range names {
		st, err := os.Stat(n)
		if err != nil {
			return nil, &InputError{err}
		}
		if st.IsDir() {
			return nil, inputErrorf("%s is a directory, not a capture file", n)
		}
	}
	if len(names) == 1 {
		if _, err := os.Stat(rotatedName(names[0], 1)); err == nil {
			return openSet(names[0]), nil
		}
	}
	var out []source
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			closeAll(out)
			return nil, &InputError{err}
		}
		out = append(out, source{name: n, f: f})
	}
	return out, nil
}

// openSet opens path and its rotated siblings and orders them oldest first
// by their first record's time, not by their names: a tap still writing
// may rotate them while they are being opened, and names shift then,
// while an open file stays itself. The names are scanned in rising order,
// the direction rotation moves files in, so no file can slip past the
// scan; one seen twice (renamed during the scan) is kept once. A file
// without a complete first record yet is the one the writer just created:
// the newest.
func openSet(path string) []source {
	type dated struct {
		source
		at      time.Time
		started bool
	}
	var set []dated
	for i, misses := 0, 0; misses < 2; i++ {
		name := rotatedName(path, i)
		f, err := os.Open(name)
		if err != nil {
			misses++ // one name can be missing mid-rotation, between two renames
			continue
		}
		misses = 0
		st, err := f.Stat()
		dup := err != nil
		for _, d := range set {
			if dst, err := d.f.Stat(); err == nil && os.SameFile(st, dst) {
				dup = true
			}
		}
		if dup {
			f.Close()
			continue
		}
		at, ok := headerTime(f)
		f.Seek(0, io.SeekStart)
		set = append(set, dated{source{name: name, f: f, fresh: !ok}, at, ok})
	}
	slices.SortStableFunc(set, func(a, b dated) int {
		switch {
		case a.started != b.started:
			if a.started {
				return -1
			}
			return 1
		}
		return a.at.Compare(b.at)
	})
	out := make([]source, len(set))
	for i, d := range set {
		out[i] = d.source
	}
	return out
}

// rotatedName is capture.Writer's name for the i-th older file of path.
func rotatedName(path string, i int) string {
	if i == 0 {
		return path
	}
	return fmt.Sprintf("%s.%d", path, i)
}

// reader feeds files to a replayer, checking that each is a capture.
type reader struct {
	rp     *replayer
	stderr io.Writer
	// command names the adstap command in warnings: inspect unless set.
	command string
	poll    time.Duration
	files   []fileRead
	// polled, when set, is told each time a followed file was found with
	// nothing new, so a test can wait for polls rather than sleep.
	polled func()
	// raw, when set, is handed every record, checked, instead of the
	// replayer.
	raw func(*capture.Record) error
}

// readFile reads a whole file. A last record cut short is reported on
// stderr and the records before it are kept.
func (r *reader) readFile(ctx context.Context, src source) error {
	name := src.name
	fr := fileRead{Name: name}
	rd := capture.NewReader(src.f, name)
	for {
		if fr.Records%1024 == 0 && ctx.Err() != nil {
			break
		}
		rec, err := rd.Next()
		if fr.Records == 0 && src.fresh && (err == io.EOF || errors.Is(err, capture.ErrIncomplete)) {
			return nil // nothing in it yet
		}
		if err == io.EOF {
			if fr.Records == 0 {
				return inputErrorf("%s is empty: not an adstap capture file (adstap run --capture writes one)", name)
			}
			break
		}
		if errors.Is(err, capture.ErrIncomplete) && fr.Records > 0 {
			fr.Truncated = true
			fmt.Fprintf(r.stderr, "adstap %s: warning: %s ends in an incomplete record (record %d: the writer was stopped mid-write, or the file was copied while being written); read its %d complete records\n", r.name(), name, fr.Records+1, fr.Records)
			break
		}
		if err != nil {
			if fr.Records == 0 {
				return inputErrorf("not an adstap capture file: %v", err) // err names the file
			}
			return inputErrorf("%s is corrupt at record %d: %v", name, fr.Records+1, err)
		}
		if err := r.record(&fr, &rec); err != nil {
			return err
		}
	}
	r.files = append(r.files, fr)
	return nil
}

func (r *reader) name() string {
	if r.command == "" {
		return "inspect"
	}
	return r.command
}

// record checks a file's first record and hands every record to the replayer.
func (r *reader) record(fr *fileRead, rec *capture.Record) error {
	if fr.Records == 0 {
		if rec.Kind != capture.KindCapture {
			return inputErrorf("%s is not an adstap capture file: its first record is of kind %q, not %q", fr.Name, rec.Kind, capture.KindCapture)
		}
		if rec.Format > capture.FormatVersion {
			return inputErrorf("%s is in capture format %d, newer than this adstap reads (%d): use a newer adstap", fr.Name, rec.Format, capture.FormatVersion)
		}
		fr.Header = *rec
		if r.raw == nil {
			r.rp.fileStart(fr.Name, rec)
		}
	} else if r.raw == nil {
		r.rp.record(rec)
	}
	fr.Records++
	if r.raw != nil {
		return r.raw(rec)
	}
	return nil
}

// follow reads path as it grows until ctx ends. When the writer rotates it
// (PATH becomes PATH.1 and a new PATH starts), the rest of the old file is
// read, then the file that followed it.
func (r *reader) follow(ctx context.Context, src source, path string) error {
	t := &tail{name: src.name, f: src.f}
	t.rewind()
	defer func() {
		if t.f != src.f {
			t.close()
		}
	}()
	fr := fileRead{Name: src.name}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if err := r.drain(ctx, t, &fr); err != nil {
			return err
		}
		if ctx.Err() != nil {
			r.files = append(r.files, fr)
			return nil
		}
		if next := nextFile(path, t, fr.Header.Time); next != nil {
			// The writer closes a file before it renames it: what is in
			// it now is all it will ever hold.
			t.final = true
			if err := r.drain(ctx, t, &fr); err != nil {
				next.close()
				return err
			}
			r.files = append(r.files, fr)
			if t.f != src.f {
				t.close()
			}
			t, fr = next, fileRead{Name: next.name}
			continue
		}
		r.rp.idle(time.Now())
		if r.polled != nil {
			r.polled()
		}
		timer.Reset(r.poll)
		select {
		case <-ctx.Done():
			r.files = append(r.files, fr)
			return nil
		case <-timer.C:
		}
	}
}

// drain reads every complete record the tail has now.
func (r *reader) drain(ctx context.Context, t *tail, fr *fileRead) error {
	if t.restarted() {
		// The path was truncated in place: a new tap started writing it.
		r.files = append(r.files, *fr)
		*fr = fileRead{Name: fr.Name}
		t.rewind()
	}
	for {
		if fr.Records%1024 == 1023 && ctx.Err() != nil {
			return nil
		}
		rec, err := t.rd.Next()
		if err == io.EOF {
			return nil
		}
		if errors.Is(err, capture.ErrIncomplete) {
			if !t.final {
				return nil // the writer is in the middle of it: the reader goes on from there next time
			}
			if fr.Records == 0 {
				return inputErrorf("not an adstap capture file: %v", err) // err names the file
			}
			fr.Truncated = true
			fmt.Fprintf(r.stderr, "adstap inspect: warning: %s ends in an incomplete record; read its %d complete records\n", fr.Name, fr.Records)
			return nil
		}
		if err != nil {
			if fr.Records == 0 {
				return inputErrorf("not an adstap capture file: %v", err) // err names the file
			}
			return err
		}
		if err := r.record(fr, &rec); err != nil {
			return err
		}
	}
}

// tail is a file being followed.
type tail struct {
	name string
	f    *os.File
	src  *counted
	rd   *capture.Reader
	// final: the writer has moved on to another file, so a record cut
	// short at the end of this one will stay so.
	final bool
}

func (t *tail) rewind() {
	t.f.Seek(0, io.SeekStart)
	t.src = &counted{r: t.f}
	t.rd = capture.NewReader(t.src, t.name)
}

func (t *tail) close() { t.f.Close() }

// restarted reports whether the file shrank below what was read: it was
// truncated and is being written again from the start.
func (t *tail) restarted() bool {
	st, err := t.f.Stat()
	return err == nil && st.Size() < t.src.n
}

// counted counts the bytes read from r.
type counted struct {
	r io.Reader
	n int64
}

func (c *counted) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// nextFile returns the file the writer started after t's, opened, once t's
// is no longer the capture's current file; nil until then.
//
// Names are no good for this: by the time a rotated name is opened, another
// rotation may have moved a different file there. Every file's first
// record, though, is stamped with the moment the writer created it, so the
// next file is the one with the earliest first record after t's. The names
// are scanned in rising order, the direction rotation moves files in, so a
// file being renamed during the scan is still seen; a file created after
// the scan passed PATH is newer than any it found, and found next time.
func nextFile(path string, t *tail, started time.Time) *tail {
	mine, err := t.f.Stat()
	if err != nil {
		return nil
	}
	if cur, err := os.Stat(path); err == nil && os.SameFile(mine, cur) {
		return nil
	}
	var best *os.File
	var bestAt time.Time
	for i, misses := 0, 0; misses < 2; i++ {
		f, err := os.Open(rotatedName(path, i))
		if err != nil {
			// One name can be missing mid-rotation, between two renames.
			misses++
			continue
		}
		misses = 0
		st, err := f.Stat()
		at, ok := headerTime(f)
		switch {
		case err != nil || os.SameFile(st, mine) || !ok || !at.After(started):
			f.Close()
		case best == nil || at.Before(bestAt):
			if best != nil {
				best.Close()
			}
			best, bestAt = f, at
		default:
			f.Close()
		}
	}
	if best == nil {
		return nil
	}
	t2 := &tail{name: best.Name(), f: best}
	t2.rewind()
	return t2
}

// headerTime reads the time of a capture file's first record, if it is
// complete and of kind capture.
func headerTime(f *os.File) (time.Time, bool) {
	buf := make([]byte, 16<<10)
	n, _ := io.ReadFull(f, buf)
	line, _, ok := bytes.Cut(buf[:n], []byte("\n"))
	if !ok {
		return time.Time{}, false
	}
	var rec capture.Record
	if json.Unmarshal(line, &rec) != nil || rec.Kind != capture.KindCapture {
		return time.Time{}, false
	}
	return rec.Time, true
}

// defaultPoll is how often --follow looks for new records.
const defaultPoll = 200 * time.Millisecond

// InputError is a problem with what inspect was asked to read: a missing
// file, or one that is not a capture. The command exits 2 for it.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }

func (e *InputError) Unwrap() error { return e.Err }

func inputErrorf(format string, a ...any) error {
	return &InputError{fmt.Errorf(format, a...)}
}

// readAll reads the files through a fresh tracker into c, and says how
// each was read; warnings go to stderr, under the name of command.
func readAll(ctx context.Context, files []string, detect track.Config, c consumer, stderr io.Writer, command string) ([]fileRead, error) {
	if stderr == nil {
		stderr = io.Discard
	}
	srcs, err := openFiles(files)
	if err != nil {
		return nil, err
	}
	defer closeAll(srcs)
	rd := &reader{rp: newReplayer(detect, c), stderr: stderr, poll: defaultPoll, command: command}
	for _, src := range srcs {
		if err := rd.readFile(ctx, src); err != nil {
			return nil, err
		}
	}
	return rd.files, nil
}

func fileList(files []fileRead) string {
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}
