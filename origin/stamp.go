package origin

import (
	"bytes"
	"slices"
	"strings"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/track"
)

// maxChanged is the most objects Changed and Rejection.Changed name for one
// push: a route configuration gathers the virtual hosts of every
// VirtualService on its port, so a change to one of them can carry dozens.
// Past it, Stamped.Truncated says more were there.
const maxChanged = 16

// Stamped is what the resources a push changed record of their Istio
// objects: at most maxChanged objects, each once, in the order found.
type Stamped struct {
	Objects   []Object
	Truncated bool // more objects than maxChanged were recorded
}

// Scanner reads the Istio objects recorded in pushes, for one goroutine that
// reads push after push (the span queue's): it reuses its decoding space,
// and parses each object's path once.
type Scanner struct {
	resp   codec.Response
	parsed map[string]Object
}

// maxParsed bounds the paths a Scanner remembers.
const maxParsed = 1024

// Changed reads the Istio objects recorded in the resources a push added or
// changed (track.PushEnded.Changed) and lets go of its bytes. It never
// unmarshals a resource: it looks for each object's path in the bytes, where
// istiod writes it, and checks the protobuf fields around it (stampAt), so it
// costs about a pass over the changed resources' bytes. A nil c gives none.
func (sc *Scanner) Changed(c *track.Changed) Stamped {
	if c == nil {
		return Stamped{}
	}
	s, _ := c.Read(func(data mem.BufferSlice) any {
		return sc.stampedIn(data, c.Delta, c.UnchangedAt)
	}).(Stamped)
	return s
}

// stampedIn reads the objects of the resources of data, a response's bytes,
// but those unchanged says were carried unchanged.
func (sc *Scanner) stampedIn(data mem.BufferSlice, delta bool, unchanged func(int) bool) Stamped {
	var s Stamped
	if data == nil {
		return s
	}
	resp := &sc.resp
	// The views point into data, which the caller lets go of on return:
	// kept till the next push, they would keep the last push's bytes from
	// the collector.
	defer resp.Reset()
	if resp.DecodeBuffers(data, delta) != nil {
		return s
	}
	for i, r := range resp.Resources {
		if s.Truncated {
			break
		}
		if !r.Heartbeat && !unchanged(i) {
			s.scan(r.Body, sc)
		}
	}
	return s
}

// parse is ParsePath, remembered by sc when there is one.
func (sc *Scanner) parse(path []byte) (Object, bool) {
	if sc == nil {
		return ParsePath(string(path))
	}
	if o, ok := sc.parsed[string(path)]; ok {
		return o, true
	}
	o, ok := ParsePath(string(path))
	if ok {
		if sc.parsed == nil || len(sc.parsed) == maxParsed {
			sc.parsed = map[string]Object{}
		}
		sc.parsed[o.Path] = o
	}
	return o, ok
}

// scan adds the objects whose paths body records; sc, when not nil,
// remembers the paths it parsed.
func (s *Stamped) scan(body []byte, sc *Scanner) {
	for off := 0; off < len(body); {
		i := bytes.Index(body[off:], stampMarker)
		if i < 0 {
			return
		}
		at := off + i
		off = at + len(stampMarker)
		path, ok := stampAt(body, at)
		if !ok || slices.ContainsFunc(s.Objects, func(o Object) bool { return o.Path == string(path) }) {
			continue
		}
		o, ok := sc.parse(path)
		switch {
		case !ok:
		case len(s.Objects) == maxChanged:
			s.Truncated = true
			return
		default:
			s.Objects = append(s.Objects, o)
		}
	}
}

// configEntry is how a google.protobuf.Struct's fields entry for "config"
// begins: its key (field 1, "config"), then its value (field 2, a Value).
var configEntry = []byte("\x0a\x06config\x12")

// stampAt returns the path that starts at body[at] when body stores it as
// istiod does (AddConfigInfoMetadata): the string_value (field 3) of the
// Value of a Struct's "config" entry, which must be the whole of that
// Value. It reads the field headers backwards from the path: each length
// must end exactly where the path does.
func stampAt(body []byte, at int) ([]byte, bool) {
	for n := 1; n <= 2; n++ { // the path's length: 1 or 2 bytes of varint
		start := at - n
		if start < 1 || body[start-1] != 0x1a { // field 3, length-delimited
			continue
		}
		l, m := protowire.ConsumeVarint(body[start:at])
		if m != n || at+int(l) > len(body) || l < uint64(len(stampMarker)) {
			continue
		}
		value := uint64(1+n) + l // the Value: the string_value field and nothing else
		vlen := protowire.SizeVarint(value)
		head := start - 1 - vlen
		if head < len(configEntry) || !bytes.Equal(body[head-len(configEntry):head], configEntry) {
			continue
		}
		if v, k := protowire.ConsumeVarint(body[head : start-1]); k != vlen || v != value {
			continue
		}
		return body[at : at+int(l)], true
	}
	return nil, false
}

// Ref is how adstap rollout names the object: its kind as istiod writes it
// in the path, its namespace and its name, "destination-rule/shop/reviews".
func (o Object) Ref() string {
	if parts := strings.Split(o.Path, "/"); len(parts) == 8 {
		return parts[6] + "/" + o.Namespace + "/" + o.Name
	}
	return KebabKind(o.Kind) + "/" + o.Namespace + "/" + o.Name
}

// KebabKind is a kind as istiod writes it in a path: DestinationRule is
// destination-rule.
func KebabKind(kind string) string {
	var b strings.Builder
	for i, r := range kind {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
