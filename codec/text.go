package codec

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// Text is the string a decoded field shows as. Protobuf requires strings to
// be UTF-8, but the tap relays whatever a peer sends, and one invalid byte in
// a node id or a resource name would make Prometheus panic on a label value
// and the OTLP exporter drop a whole batch of spans; every string the
// decoders hand out goes through Text, which replaces each invalid sequence
// with U+FFFD. The relayed bytes are never touched.
func Text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// recentSlots is how many strings recentText remembers, and maxRecent the
// longest it remembers.
const (
	recentSlots = 1024
	maxRecent   = 128
)

var (
	recentSeed = maphash.MakeSeed()
	recent     [recentSlots]atomic.Pointer[string]
)

// recentText is Text for the fields whose values come back at once: a
// push's version, which istiod sends to every stream alike, and its nonce,
// which the client's ACK carries back a moment later. Each of a fixed set
// of slots, chosen by a hash of the bytes, keeps the last string made for
// it, handed out again while it is there: a version or nonce decoded a
// moment ago costs no allocation. Two values that meet in a slot take
// turns; nothing grows.
func recentText(b []byte) string {
	if len(b) == 0 || len(b) > maxRecent {
		return Text(b)
	}
	slot := &recent[maphash.Bytes(recentSeed, b)%recentSlots]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	if !utf8.Valid(b) {
		return Text(b)
	}
	s := string(b)
	slot.Store(&s)
	return s
}
