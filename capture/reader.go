package capture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxLine bounds one record's line: a format-1 frame is at most the tap's
// largest message, base64-encoded, on its line.
const maxLine = 1 << 30

// maxMessage bounds the message a format-2 line announces.
const maxMessage = 1 << 30

// readSize is how much the reader asks its source for at a time.
const readSize = 1 << 20

// Reader reads a capture file's records in order, in either format: a
// format-1 line holds its message in base64, a format-2 line is followed
// by its message. A Reader over a file still being written may be asked
// again after io.EOF or ErrIncomplete: it goes on from where it stopped, in
// the middle of a record too, once the rest is there.
type Reader struct {
	r    io.Reader
	name string
	buf  []byte // read and not handed out yet: buf[pos:]
	pos  int
	// offset is where the next record starts in the file; n counts the
	// records read.
	offset int64
	n      int

	// pending is the line of a format-2 record whose message is being
	// read, lineLen its length; msg is the message so far, read into the
	// slice the record hands out.
	pending *line
	lineLen int
	msg     []byte
}

// NewReader reads records from r; name is used in errors.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{r: r, name: name}
}

// ErrIncomplete marks a last record cut short, as a crash or kill of the
// writer leaves it: every record before it was read.
var ErrIncomplete = errors.New("incomplete record at the end of the file")

// Next returns the next record, io.EOF at the end, or an error wrapping
// ErrIncomplete for a partial last record.
func (rd *Reader) Next() (Record, error) {
	if rd.pending == nil {
		l, n, err := rd.readLine()
		if err != nil {
			return Record{}, err
		}
		rd.pos += n
		if l.Len == 0 {
			rd.offset += int64(n)
			rd.n++
			return l.Record, nil
		}
		if l.Len < 0 || l.Len > maxMessage {
			rd.pos -= n
			return Record{}, fmt.Errorf("%s: record at byte %d is not valid: a message of %d bytes", rd.name, rd.offset, l.Len)
		}
		rd.pending, rd.lineLen, rd.msg = &l, n, make([]byte, 0, l.Len)
	}
	want := rd.pending.Len
	for len(rd.msg) < want {
		var k int
		if rd.pos < len(rd.buf) {
			k = copy(rd.msg[len(rd.msg):want], rd.buf[rd.pos:])
			rd.pos += k
		} else {
			// Straight from the file into the message.
			var err error
			if k, err = rd.r.Read(rd.msg[len(rd.msg):want]); k == 0 && err != nil {
				return Record{}, rd.cut(err)
			}
		}
		rd.msg = rd.msg[:len(rd.msg)+k]
	}
	for rd.pos == len(rd.buf) {
		if err := rd.fill(); err != nil {
			return Record{}, rd.cut(err)
		}
	}
	if rd.buf[rd.pos] != '\n' {
		return Record{}, fmt.Errorf("%s: record at byte %d is not valid: its %d-byte message is not followed by a newline", rd.name, rd.offset, want)
	}
	rd.pos++
	rec := rd.pending.Record
	rec.Message = rd.msg
	rd.offset += int64(rd.lineLen + want + 1)
	rd.n++
	rd.pending, rd.msg = nil, nil
	return rec, nil
}

// readLine parses the line at pos and returns it and its length, with its
// newline.
func (rd *Reader) readLine() (line, int, error) {
	scanned := 0
	for {
		if i := bytes.IndexByte(rd.buf[rd.pos+scanned:], '\n'); i >= 0 {
			n := scanned + i + 1
			var l line
			if err := json.Unmarshal(rd.buf[rd.pos:rd.pos+n], &l); err != nil {
				return line{}, 0, fmt.Errorf("%s: record at byte %d is not valid: %w", rd.name, rd.offset, err)
			}
			return l, n, nil
		}
		scanned = len(rd.buf) - rd.pos
		if scanned > maxLine {
			return line{}, 0, fmt.Errorf("%s: record at byte %d is not valid: no end of line in %d bytes", rd.name, rd.offset, scanned)
		}
		if err := rd.fill(); err != nil {
			if err == io.EOF && len(bytes.TrimSpace(rd.buf[rd.pos:])) == 0 {
				return line{}, 0, io.EOF
			}
			return line{}, 0, rd.cut(err)
		}
	}
}

// fill reads more into buf, keeping what was not handed out.
func (rd *Reader) fill() error {
	left := rd.buf[rd.pos:]
	switch {
	case cap(rd.buf) > 8*readSize && len(left) < readSize:
		// A long format-1 line grew the buffer; it is not kept.
		rd.buf = append(make([]byte, 0, 2*readSize), left...)
	case cap(rd.buf)-len(left) < readSize/2:
		rd.buf = append(make([]byte, 0, max(2*cap(rd.buf), len(left)+readSize)), left...)
	default:
		rd.buf = rd.buf[:copy(rd.buf, left)]
	}
	rd.pos = 0
	for range 100 {
		n, err := rd.r.Read(rd.buf[len(rd.buf):cap(rd.buf)])
		rd.buf = rd.buf[:len(rd.buf)+n]
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// cut is the error for a record the source ended in the middle of.
func (rd *Reader) cut(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%s: %w (byte %d, after %d complete records)", rd.name, ErrIncomplete, rd.offset, rd.n)
	}
	return fmt.Errorf("reading %s: %w", rd.name, err)
}
