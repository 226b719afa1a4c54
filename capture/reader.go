package capture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxRecord bounds one line: a frame is at most the tap's largest message,
// base64-encoded.
const maxRecord = 1 << 30

// Reader reads a capture file's records in order.
type Reader struct {
	r      *bufio.Reader
	name   string
	offset int64
	n      int
}

// NewReader reads records from r; name is used in errors.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 1<<20), name: name}
}

// ErrIncomplete marks a last record cut short, as a crash or kill of the
// writer leaves it: every record before it was read.
var ErrIncomplete = errors.New("incomplete record at the end of the file")

// Next returns the next record, io.EOF at the end, or an error wrapping
// ErrIncomplete for a partial last line.
func (rd *Reader) Next() (Record, error) {
	line, err := rd.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		var buf bytes.Buffer
		buf.Write(line)
		for errors.Is(err, bufio.ErrBufferFull) && buf.Len() < maxRecord {
			line, err = rd.r.ReadSlice('\n')
			buf.Write(line)
		}
		line = buf.Bytes()
	}
	if err == io.EOF {
		if len(bytes.TrimSpace(line)) == 0 {
			return Record{}, io.EOF
		}
		return Record{}, fmt.Errorf("%s: %w (byte %d, after %d complete records)", rd.name, ErrIncomplete, rd.offset, rd.n)
	}
	if err != nil {
		return Record{}, fmt.Errorf("reading %s: %w", rd.name, err)
	}
	start := rd.offset
	rd.offset += int64(len(line))
	var rec Record
	if err := json.Unmarshal(line, &rec); err != nil {
		return Record{}, fmt.Errorf("%s: record at byte %d is not valid: %w", rd.name, start, err)
	}
	rd.n++
	return rec, nil
}
