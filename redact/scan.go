package redact

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/adstap/adstap/codec"
)

// Scanner finds the secrets of messages in their wire form, following the
// plans of their types, and says how to replace them: nothing is decoded
// into typed messages, and a message is read where it lies, in the pieces
// gRPC received it in. Only what leads to a secret is ever re-encoded — the
// secret's DataSource, and the length of each message around it. The zero
// Scanner is ready; it keeps scratch space from one message to the next,
// so each goroutine uses its own.
type Scanner struct {
	w     wire
	edits []edit
	spans []span
	url   []byte // a type URL that straddles pieces
}

// Redaction is what a Scanner found in one message: the edits that replace
// its secrets, in the order of the bytes. It is valid until the Scanner
// scans another message.
type Redaction struct {
	// TypeURL is the message's type_url (the last one, as protobuf reads
	// it), read on the way; "" when it has none.
	TypeURL string
	edits   []edit
	size    int // the message's
	grown   int // what the edits add to it (or take away)
}

// Redacted reports whether anything secret was found, and so replaced.
func (r *Redaction) Redacted() bool { return len(r.edits) > 0 }

// redactedLen is the size of the message once redacted.
func (r *Redaction) redactedLen() int { return r.size + r.grown }

// AppendPieces appends to dst the message once redacted, in pieces: slices
// of segs (the message the Redaction was found in) around the secrets, and
// the bytes that replace them. Nothing is copied.
func (r *Redaction) AppendPieces(dst, segs [][]byte) [][]byte {
	var c cutter
	c.segs = segs
	off := 0
	for _, e := range r.edits {
		dst = c.appendRange(dst, off, e.off)
		dst = append(dst, e.b)
		off = e.off + e.n
	}
	return c.appendRange(dst, off, r.size)
}

// edit replaces n bytes of a message at off by b.
type edit struct {
	off, n int
	b      []byte
}

// cutter cuts ranges of a message out of its pieces, in rising order.
type cutter struct {
	segs [][]byte
	i    int // the piece pos is in
	pos  int // where segs[i] starts
}

func (c *cutter) appendRange(dst [][]byte, a, b int) [][]byte {
	for a < b && c.i < len(c.segs) {
		s := c.segs[c.i]
		end := c.pos + len(s)
		if a >= end {
			c.pos, c.i = end, c.i+1
			continue
		}
		piece := s[a-c.pos : min(b, end)-c.pos]
		if len(piece) > 0 {
			dst = append(dst, piece)
		}
		a += len(piece)
	}
	return dst
}

// maxDepth bounds how deep messages nest, as protobuf's decoder does.
const maxDepth = 10000

var (
	errMalformed = errors.New("malformed protobuf")
	errTooDeep   = errors.New("messages nested too deep")
)

// Response finds the secrets of a DiscoveryResponse (delta: a
// DeltaDiscoveryResponse) whose bytes are segs, in order.
func (s *Scanner) Response(segs [][]byte, delta bool) (Redaction, error) {
	root, typeURL := sotwResponse, sotwResponseTypeURL
	if delta {
		root, typeURL = deltaResponse, deltaResponseTypeURL
	}
	r, err := s.scan(segs, root(), typeURL)
	if err != nil {
		return Redaction{}, fmt.Errorf("redacting: reading the response: %w", err)
	}
	return r, nil
}

// resource finds the secrets of a resource of the type typeURL names; a
// type the binary does not know, or that can hold no secret, is not read.
func (s *Scanner) resource(typeURL string, segs [][]byte) (Redaction, error) {
	p := planOfURL([]byte(typeURL))
	r, err := s.scan(segs, p, 0)
	if err != nil {
		return Redaction{}, fmt.Errorf("redacting: reading the %s resource: %w", codec.TypeName(typeURL), err)
	}
	return r, nil
}

func (s *Scanner) scan(segs [][]byte, p *plan, typeURL protowire.Number) (Redaction, error) {
	s.w.reset(segs)
	s.edits = s.edits[:0]
	defer func() { s.w.segs = nil }() // kept, they would hold on to buffers gRPC wants back
	r := Redaction{size: s.w.size()}
	if p == nil && typeURL == 0 {
		return r, nil
	}
	if p == nil {
		p = &plan{}
	}
	grown, err := s.message(p, 0, r.size, 0, typeURL, &r.TypeURL)
	if err != nil {
		return Redaction{}, err
	}
	r.edits, r.grown = s.sortedEdits(), grown
	return r, nil
}

// sortedEdits returns the edits in the order of the bytes: a message's
// length is edited after what is inside it, which lies further on.
func (s *Scanner) sortedEdits() []edit {
	slices.SortFunc(s.edits, func(a, b edit) int { return a.off - b.off })
	return s.edits
}

// message walks the message at [start, end) of the type p plans for,
// adding the edits its secrets need; it returns how much they grow it.
// When typeURL is set, the last string in that field is read into url.
func (s *Scanner) message(p *plan, start, end, depth int, typeURL protowire.Number, url *string) (int, error) {
	if depth > maxDepth {
		return 0, errTooDeep
	}
	if p.any {
		return s.anyValue(start, end, depth)
	}
	grown := 0
	for off := start; off < end; {
		f, err := s.w.field(off, end)
		if err != nil {
			return 0, err
		}
		if f.typ == protowire.BytesType {
			switch fp := p.field(f.num); {
			case f.num == typeURL:
				*url = codec.InternTypeURL(s.w.bytes(f.value, f.end, &s.url))
			case fp == nil:
			case fp.secret:
				g, err := s.dataSource(f)
				if err != nil {
					return 0, err
				}
				grown += g
			default:
				g, err := s.message(fp.msg, f.value, f.end, depth+1, 0, nil)
				if err != nil {
					return 0, err
				}
				grown += s.resize(f, g)
			}
		}
		off = f.end
	}
	return grown, nil
}

// resize records the new length of the length-delimited field f, whose
// value grew by g, and returns how much the field grew.
func (s *Scanner) resize(f field, g int) int {
	if g == 0 {
		return 0
	}
	n := protowire.AppendVarint(nil, uint64(f.end-f.value+g))
	s.edits = append(s.edits, edit{off: f.length, n: f.value - f.length, b: n})
	return g + len(n) - (f.value - f.length)
}

// anyValue walks the value of the Any at [start, end) as the type its
// type_url names, if that type can hold a secret.
func (s *Scanner) anyValue(start, end, depth int) (int, error) {
	var p *plan
	for off := start; off < end; {
		f, err := s.w.field(off, end)
		if err != nil {
			return 0, err
		}
		if f.num == anyTypeURL && f.typ == protowire.BytesType {
			p = planOfURL(s.w.bytes(f.value, f.end, &s.url)) // the last one wins
		}
		off = f.end
	}
	if p == nil {
		return 0, nil
	}
	grown := 0
	for off := start; off < end; {
		f, err := s.w.field(off, end)
		if err != nil {
			return 0, err
		}
		if f.num == anyValue && f.typ == protowire.BytesType {
			g, err := s.message(p, f.value, f.end, depth+1, 0, nil)
			if err != nil {
				return 0, err
			}
			grown += s.resize(f, g)
		}
		off = f.end
	}
	return grown, nil
}

// Field numbers of google.protobuf.Any and envoy.config.core.v3.DataSource
// (checked against their descriptors by the tests).
const (
	anyTypeURL = 1
	anyValue   = 2

	dsFilename     = 1
	dsInlineBytes  = 2
	dsInlineString = 3
	dsEnvVariable  = 4
)

// span is one field of a DataSource.
type span struct {
	field
	inline bool // inline_bytes or inline_string: key material
	spec   bool // one of the specifier oneof's fields
}

// dataSource replaces the DataSource field f, which holds key material,
// when the key is inline: the specifier protobuf keeps (the last one)
// becomes an inline_string holding the key's fingerprint, and inline
// values it overrides are dropped. A file name or environment variable is
// not the secret itself and stays, with every other field.
func (s *Scanner) dataSource(f field) (int, error) {
	spans := s.spans[:0]
	last, inline := -1, false
	for off := f.value; off < f.end; {
		g, err := s.w.field(off, f.end)
		if err != nil {
			return 0, err
		}
		sp := span{field: g}
		if g.typ == protowire.BytesType {
			switch g.num {
			case dsInlineBytes, dsInlineString:
				sp.inline, sp.spec, inline = true, true, true
			case dsFilename, dsEnvVariable:
				sp.spec = true
			}
		}
		if sp.spec {
			last = len(spans)
		}
		spans = append(spans, sp)
		off = g.end
	}
	s.spans = spans[:0]
	if !inline || s.redactedAlready(spans, last) {
		return 0, nil
	}
	var body []byte
	for i, sp := range spans {
		switch {
		case i == last && sp.inline:
			var scratch []byte
			fp := Fingerprint(s.w.bytes(sp.value, sp.end, &scratch))
			body = protowire.AppendTag(body, dsInlineString, protowire.BytesType)
			body = protowire.AppendString(body, fp)
		case sp.inline:
			// Overridden by a later specifier: dead, and still a secret.
		default:
			body = s.w.appendRange(body, sp.start, sp.end)
		}
	}
	out := s.w.appendRange(nil, f.start, f.length)
	out = protowire.AppendBytes(out, body)
	s.edits = append(s.edits, edit{off: f.start, n: f.end - f.start, b: out})
	return len(out) - (f.end - f.start), nil
}

// redactedAlready reports whether a DataSource's key material is already a
// fingerprint and nothing else: one inline value, the specifier protobuf
// keeps, an inline_string that is exactly what Fingerprint writes. A
// resource read back from a capture file or a page is redacted again as it
// is shown; replaced again, the fingerprint would be one of the
// fingerprint, and no longer match the one the tap showed live. Only the
// exact form is left: anything more in the value may be a secret.
func (s *Scanner) redactedAlready(spans []span, last int) bool {
	if last < 0 || !spans[last].inline || spans[last].num != dsInlineString {
		return false
	}
	for i, sp := range spans {
		if sp.inline && i != last {
			return false
		}
	}
	var scratch []byte
	return isFingerprint(s.w.bytes(spans[last].value, spans[last].end, &scratch))
}

// field is one field of a message in the wire: its tag at start, its
// value at value (after the length, at length, of a length-delimited
// one), the next field at end.
type field struct {
	num                       protowire.Number
	typ                       protowire.Type
	start, length, value, end int
}

// maxHeader is the most a field's tag and length take.
const maxHeader = 20

// wire reads a message that lies in pieces.
type wire struct {
	segs   [][]byte
	starts []int // where each piece starts; the last entry is the message's size
	cur    int   // the piece last read
	tmp    [maxHeader]byte
	groups int // groups being skipped, one in the other
}

func (w *wire) reset(segs [][]byte) {
	w.segs, w.cur = segs, 0
	w.starts = w.starts[:0]
	n := 0
	for _, s := range segs {
		w.starts = append(w.starts, n)
		n += len(s)
	}
	w.starts = append(w.starts, n)
}

func (w *wire) size() int { return w.starts[len(w.segs)] }

// piece returns the index of the piece that holds off (< size). The walk
// mostly moves forward, a field at a time.
func (w *wire) piece(off int) int {
	i := w.cur
	if off >= w.starts[i] && off < w.starts[i+1] {
		return i
	}
	if i+2 < len(w.starts) && off >= w.starts[i+1] && off < w.starts[i+2] {
		i++
	} else {
		i = sort.Search(len(w.segs), func(j int) bool { return w.starts[j+1] > off })
	}
	w.cur = i
	return i
}

// peek returns at least min(maxHeader, end-off) bytes from off, never
// past end: in place when they lie in one piece, else copied.
func (w *wire) peek(off, end int) []byte {
	want := min(maxHeader, end-off)
	i := w.piece(off)
	s := w.segs[i][off-w.starts[i]:]
	if len(s) >= want {
		return s[:min(len(s), end-off)]
	}
	b := w.tmp[:0]
	for len(b) < want {
		i := w.piece(off)
		s := w.segs[i][off-w.starts[i]:]
		s = s[:min(len(s), want-len(b))]
		b = append(b, s...)
		off += len(s)
	}
	return b
}

// bytes returns [a, b) in one piece: in place when it lies in one, else
// copied into *scratch.
func (w *wire) bytes(a, b int, scratch *[]byte) []byte {
	if a == b {
		return nil
	}
	i := w.piece(a)
	if b <= w.starts[i+1] {
		return w.segs[i][a-w.starts[i] : b-w.starts[i]]
	}
	*scratch = w.appendRange((*scratch)[:0], a, b)
	return *scratch
}

// appendRange appends [a, b) to dst.
func (w *wire) appendRange(dst []byte, a, b int) []byte {
	for a < b {
		i := w.piece(a)
		s := w.segs[i][a-w.starts[i]:]
		s = s[:min(len(s), b-a)]
		dst = append(dst, s...)
		a += len(s)
	}
	return dst
}

// field reads the field at off, which must end by end.
func (w *wire) field(off, end int) (field, error) {
	h := w.peek(off, end)
	num, typ, n := protowire.ConsumeTag(h)
	if n < 0 {
		return field{}, fmt.Errorf("%w: bad tag at byte %d", errMalformed, off)
	}
	f := field{num: num, typ: typ, start: off, length: off + n}
	var m int
	switch typ {
	case protowire.BytesType:
		l, k := protowire.ConsumeVarint(h[n:])
		if k < 0 || l > uint64(end-off-n-k) {
			return field{}, fmt.Errorf("%w: field %d at byte %d runs past its message", errMalformed, num, off)
		}
		f.value = off + n + k
		f.end = f.value + int(l)
		return f, nil
	case protowire.VarintType:
		_, m = protowire.ConsumeVarint(h[n:])
	case protowire.Fixed32Type:
		m = 4
	case protowire.Fixed64Type:
		m = 8
	case protowire.StartGroupType:
		w.groups++
		e, err := w.skipGroup(num, off+n, end)
		w.groups--
		if err != nil {
			return field{}, err
		}
		f.value, f.end = off+n, e
		return f, nil
	default:
		return field{}, fmt.Errorf("%w: unexpected wire type %d at byte %d", errMalformed, typ, off)
	}
	if m < 0 || m > end-off-n {
		return field{}, fmt.Errorf("%w: field %d at byte %d runs past its message", errMalformed, num, off)
	}
	f.value = off + n
	f.end = f.value + m
	return f, nil
}

// skipGroup returns where the group num that starts at off ends, past its
// end-group tag. Groups are proto2's; no xDS type has one, but a message
// that holds one is still read.
func (w *wire) skipGroup(num protowire.Number, off, end int) (int, error) {
	if w.groups > maxDepth {
		return 0, errTooDeep
	}
	for off < end {
		h := w.peek(off, end)
		n2, typ, n := protowire.ConsumeTag(h)
		if n < 0 {
			return 0, fmt.Errorf("%w: bad tag at byte %d", errMalformed, off)
		}
		if typ == protowire.EndGroupType {
			if n2 != num {
				return 0, fmt.Errorf("%w: mismatched end of group at byte %d", errMalformed, off)
			}
			return off + n, nil
		}
		f, err := w.field(off, end)
		if err != nil {
			return 0, err
		}
		off = f.end
	}
	return 0, fmt.Errorf("%w: group %d has no end", errMalformed, num)
}
