package codec

import (
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// decodeSegments is Decode for a message that arrived in pieces: segs, in
// order, make up the message, the way gRPC receives a large one (a buffer per
// HTTP/2 DATA frame, 16 KB at most). The result, error messages included, is
// the one Decode gives for the concatenation of segs.
//
// Each top-level field that lies within one segment is read in place; one
// that straddles segments (about one resource per segment) is copied into
// scratch space that r keeps and reuses, so a reused Response decodes a
// steady stream of pushes without allocating per resource. The resources'
// views therefore point into segs or into that scratch space: they are valid
// until segs are released or r decodes another message, whichever comes
// first.
//
// Requests have no segmented counterpart: they are small enough that
// DecodeRequest on a copy costs nothing worth saving.
func (r *Response) decodeSegments(segs [][]byte, delta bool) error {
	controlPlane := r.ControlPlane
	r.Reset()
	r.Delta = delta
	r.scratch.msg = segs
	defer func() { r.scratch.msg = nil }()
	rd := segReader{segs: segs, arena: &r.scratch.arena}
	for _, s := range segs {
		rd.after += len(s)
	}
	rd.total = rd.after
	for rd.next() {
		if rd.typ != protowire.BytesType {
			continue
		}
		if err := r.field(rd.num, rd.b, controlPlane); err != nil {
			return r.wrap(err)
		}
	}
	if rd.err != nil {
		return r.wrap(rd.err)
	}
	return nil
}

// DecodeBuffers is Decode for a message still in the buffers gRPC received it
// in, read in place but for the fields that straddle two buffers
// (decodeSegments). The caller keeps its reference to data for as long as it
// uses r's views.
func (r *Response) DecodeBuffers(data mem.BufferSlice, delta bool) error {
	// The list of segments is kept in r because a 10 MB push has some 600
	// of them, too many to allocate a list for every push.
	segs := r.scratch.segs[:0]
	for _, b := range data {
		segs = append(segs, b.ReadOnlyData())
	}
	err := r.decodeSegments(segs, delta)
	// Kept, the list would hold on to buffers gRPC wants back.
	clear(segs)
	r.scratch.segs = segs[:0]
	return err
}

// segScratch is what a Response keeps from one decodeSegments to the next.
type segScratch struct {
	arena arena
	segs  [][]byte // DecodeBuffers' list of segments, cleared between uses
	// msg is the message being decoded, for growResources; nil between
	// decodes. one holds Decode's message as a list of one segment.
	msg [][]byte
	one [1][]byte
}

// countFields counts the length-delimited top-level fields num of the
// message in segs, reading only the fields' headers, so that a list of them
// is grown once to its size rather than doubled by append from a few. It
// stops at a malformed field or a group, where the decode that follows
// finds the fault (or reads the group); the count is then what came before.
func countFields(segs [][]byte, num protowire.Number) int {
	r := segReader{segs: segs}
	for _, s := range segs {
		r.after += len(s)
	}
	n := 0
	for {
		r.seek()
		h := r.fr.buf[r.fr.off:]
		if len(h) == 0 {
			return n
		}
		if len(h) < len(r.hdr) && r.after > 0 {
			h = r.peek() // the header may straddle segments
		}
		fnum, typ, k := protowire.ConsumeTag(h)
		if k < 0 {
			return n
		}
		var m int
		switch typ {
		case protowire.BytesType:
			l, lm := protowire.ConsumeVarint(h[k:])
			if lm < 0 || l > uint64(r.left()-k-lm) {
				return n
			}
			m = lm + int(l)
			if fnum == num {
				n++
			}
		case protowire.StartGroupType:
			return n
		default:
			if m = protowire.ConsumeFieldValue(fnum, typ, h[k:]); m < 0 {
				return n
			}
		}
		r.skip(k + m)
	}
}

func (s *segScratch) reset() { s.arena.reset() }

// ViewCopies is the bytes of the copies that r's last decode made of the
// fields that straddled segments: what KeepViews would leave to the views.
// A caller that may not keep them asks first, since KeepViews costs the
// next decode a fresh chunk.
func (r *Response) ViewCopies() int { return r.scratch.arena.used }

// KeepViews lets the views of r's last decode outlive its next one: the
// copies of the fields that straddled segments are left to them instead of
// being overwritten, and the next decode that needs copies makes new ones.
// The views into the message's own segments stay valid for as long as the
// caller holds those. It returns the bytes of copies left to the views.
func (r *Response) KeepViews() int {
	a := &r.scratch.arena
	n := a.used
	// The chunks before the current one are never written again; the
	// current one is let go of, and the next decode sizes its first chunk
	// for what this one copied (reset).
	a.chunk = nil
	return n
}

// minChunk is the smallest arena chunk: a gRPC segment's worth, as a message
// that straddles at all is likely to straddle once per segment.
const minChunk = 16 << 10

// arena holds the copies of straddling fields. Resources keep views into it,
// so a full chunk is left as it is and a new one started, instead of being
// grown by append, which would copy everything handed out so far for
// nothing. reset then sizes the next first chunk to hold a whole decode, so
// that like pushes stop allocating after the first.
type arena struct {
	chunk []byte // the chunk being filled; its length is what is handed out
	used  int    // bytes handed out since reset, over every chunk
	next  int    // the size of the next chunk to allocate, if larger
}

func (a *arena) reset() {
	if a.used > cap(a.chunk) {
		// A quarter more, so that a slowly growing push does not
		// allocate every time.
		a.chunk, a.next = nil, a.used+a.used/4
	}
	a.chunk = a.chunk[:0]
	a.used = 0
}

// alloc returns n bytes of arena, capped so that appending to a view cannot
// overwrite the next one. done and left are the bytes of the message read
// and still to read: a new chunk is sized for what the rest of the message
// will likely straddle, at the rate so far, and a quarter more, so that a
// 40 MB push's 2.5 MB of copies take a chunk or two rather than doubling
// chunks whose last is half empty.
func (a *arena) alloc(n, done, left int) []byte {
	if cap(a.chunk)-len(a.chunk) < n {
		size := max(n, minChunk, a.next)
		if done > 0 {
			rest := int(int64(a.used+n) * int64(left) / int64(done))
			size = max(size, min(rest+rest/4, left))
		}
		a.chunk = make([]byte, 0, size)
		a.next = 0
	}
	l := len(a.chunk)
	a.chunk = a.chunk[:l+n]
	a.used += n
	return a.chunk[l : l+n : l+n]
}

// segReader walks the top-level fields of a message made of segments, as
// fieldReader does for one in a single piece, and gives the same fields and
// errors. A field within one segment is read in place, as fast as Decode
// reads it; only a field that does not fit in what is left of its segment
// takes the slow path, which reads its header across segments and copies its
// value if that straddles too.
type segReader struct {
	fr    fieldReader // over the segment the cursor is in; base is its offset
	segs  [][]byte    // the segments after it
	after int         // bytes in segs
	total int         // bytes in the whole message
	arena *arena
	err   error

	num protowire.Number
	typ protowire.Type
	b   []byte // value of a length-delimited field

	// hdr holds a header (tag and length, each a varint of at most 10
	// bytes) gathered across segments.
	hdr [2 * binary.MaxVarintLen64]byte
}

// next moves to the next field; it returns false at the end of the message or
// at the first malformed byte, after which err says what went wrong.
func (r *segReader) next() bool {
	if r.err != nil {
		return false
	}
	r.seek()
	b := r.fr.buf[r.fr.off:]
	if len(b) == 0 {
		return false // seek found no more bytes
	}
	// fieldReader.next, less its errors: failing here is what a field
	// straddling segments does, once per segment, and must cost no more
	// than reading it.
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num <= protowire.MaxValidNumber {
		var m int
		if typ == protowire.BytesType {
			r.b, m = protowire.ConsumeBytes(b[n:])
		} else {
			m = protowire.ConsumeFieldValue(num, typ, b[n:])
		}
		if m >= 0 {
			r.num, r.typ = num, typ
			r.fr.off += n + m
			return true
		}
	}
	if r.after == 0 {
		// This segment holds the rest of the message, so the field is not
		// cut by a segment boundary: the error is the message's own, and
		// fieldReader words it as Decode does.
		r.fr.next()
		r.err = r.fr.err
		return false
	}
	return r.straddling()
}

// straddling reads the field at the cursor the way fieldReader.next does, but
// from bytes gathered across segments.
func (r *segReader) straddling() bool {
	start := r.fr.base + r.fr.off
	// Each protowire function below reads at most 10 bytes past where it
	// starts, so on h, which holds 20 bytes or the rest of the message, it
	// sees what it would on the whole message.
	h := r.peek()
	num, typ, n := protowire.ConsumeTag(h)
	if n < 0 {
		return r.fail(start, protowire.ParseError(n))
	}
	if num > protowire.MaxValidNumber {
		return r.fail(start, fmt.Errorf("%w %d", errFieldNumber, num))
	}
	switch typ {
	case protowire.BytesType:
		l, m := protowire.ConsumeVarint(h[n:])
		if m < 0 {
			return r.fail(start, fmt.Errorf("field %d: %w", num, protowire.ParseError(m)))
		}
		r.skip(n + m)
		if l > uint64(r.left()) {
			// What protowire.ConsumeBytes reports for a value cut short.
			return r.fail(start, fmt.Errorf("field %d: %w", num, io.ErrUnexpectedEOF))
		}
		r.b = r.take(int(l))
	case protowire.StartGroupType:
		// A group's end is found only by parsing it. No xDS message has
		// one, so rather than parse across segments, the rest of the
		// message is copied and read in one piece.
		r.coalesce()
		return r.next()
	default:
		m := protowire.ConsumeFieldValue(num, typ, h[n:])
		if m < 0 {
			return r.fail(start, fmt.Errorf("field %d: %w", num, protowire.ParseError(m)))
		}
		r.skip(n + m)
	}
	r.num, r.typ = num, typ
	return true
}

// fail reports err as fieldReader.fail does.
func (r *segReader) fail(at int, err error) bool {
	r.err = fmt.Errorf("at byte %d: %w", at, err)
	return false
}

// seek moves the cursor from the end of a segment to the start of the next
// one that has bytes, if any.
func (r *segReader) seek() {
	for r.fr.off == len(r.fr.buf) && len(r.segs) > 0 {
		r.fr.base += len(r.fr.buf)
		r.fr.buf, r.fr.off = r.segs[0], 0
		r.after -= len(r.segs[0])
		r.segs = r.segs[1:]
	}
}

// left is the number of bytes from the cursor to the end of the message.
func (r *segReader) left() int { return len(r.fr.buf) - r.fr.off + r.after }

// peek copies the bytes at the cursor into hdr, as many as fit.
func (r *segReader) peek() []byte {
	n := copy(r.hdr[:], r.fr.buf[r.fr.off:])
	for _, s := range r.segs {
		if n == len(r.hdr) {
			break
		}
		n += copy(r.hdr[n:], s)
	}
	return r.hdr[:n]
}

// skip moves the cursor k bytes on; k must not exceed left.
func (r *segReader) skip(k int) {
	for {
		rest := len(r.fr.buf) - r.fr.off
		if k <= rest {
			r.fr.off += k
			return
		}
		k -= rest
		r.fr.off = len(r.fr.buf)
		r.seek()
	}
}

// take returns the next l bytes, which must not exceed left, and moves the
// cursor past them: a view of the segment when they lie in one, else a copy.
func (r *segReader) take(l int) []byte {
	r.seek()
	if l <= len(r.fr.buf)-r.fr.off {
		v := r.fr.buf[r.fr.off : r.fr.off+l]
		r.fr.off += l
		return v
	}
	v := r.arena.alloc(l, r.total-r.left(), r.left())
	for n := 0; n < l; {
		r.seek()
		c := copy(v[n:], r.fr.buf[r.fr.off:])
		r.fr.off += c
		n += c
	}
	return v
}

// coalesce copies the rest of the message into the arena and makes that
// copy the last segment.
func (r *segReader) coalesce() {
	rest := r.arena.alloc(r.left(), r.total-r.left(), r.left())
	n := copy(rest, r.fr.buf[r.fr.off:])
	for _, s := range r.segs {
		n += copy(rest[n:], s)
	}
	r.fr = fieldReader{buf: rest, base: r.fr.base + r.fr.off}
	r.segs, r.after = nil, 0
}
