package tap

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"google.golang.org/grpc/mem"
)

// A control plane's full push sends the same bytes to every proxy, but for
// a few: istiod's nonce is its own for each stream. Held for the observer
// as they arrived, a push to a thousand streams is a thousand copies in
// gRPC's buffers, which its pool cannot hand out again while they wait, so
// gRPC reads every frame after into fresh memory, whose first touch costs
// more than observing it (docs/performance.md, W6). So, once the relay has
// forwarded such a frame and while it still waits for the observer, the
// queue lets go of its buffers and holds instead the bytes it shares with
// a frame seen before, kept once for every stream, and a copy of the few
// that differ: the same bytes, in other buffers. The frame itself was
// forwarded from gRPC's buffers before any of this, untouched.
//
// A frame is recognised by the bytes it starts with (foldSketch of them);
// the second frame that starts as one seen before is copied once to be the
// shared bytes, and the frames after are compared with it byte for byte:
// what they share is the longest common prefix and suffix, and a frame is
// folded only when what lies between differs in at most maxDiffer bytes.
// The shared bytes are referenced weakly by the folder and strongly by the
// frames folded into them, so they live while some queue (or an observer
// keeping a frame) holds one, and no longer.
const (
	// foldFrom is the smallest frame folded: below it, what a frame holds
	// is one or two of gRPC's buffers, and the comparison is not worth it.
	foldFrom = 32 << 10
	// foldUpTo is the largest: a proxy's own large push (a sidecar's 10 MB
	// CDS) is not sent to others through the same tap, and copying it to
	// compare would cost what folding saves.
	foldUpTo = 4 << 20
	// foldSketch is how many leading bytes recognise a frame seen before.
	foldSketch = 1 << 10
	// foldShared is how many shared byte strings the folder knows at once,
	// and foldSeen how many frames it remembers having seen.
	foldShared = 4
	foldSeen   = 8
)

// maxDiffer is the most bytes a frame of n bytes may differ in from the
// shared bytes and still be folded into them.
func maxDiffer(n int) int { return 512 + n/32 }

// folder recognises frames that repeat one seen before, over every stream
// of a tap.
type folder struct {
	seed maphash.Seed

	mu       sync.Mutex
	seen     [foldSeen]seenFrame
	nextSeen int
	shared   [foldShared]sharedBytes
	next     int

	frames atomic.Uint64 // folded
}

// seenFrame is a frame seen once: its length and its leading bytes' hash.
type seenFrame struct {
	size int
	head uint64
}

// sharedBytes is a frame's bytes kept for the frames that repeat it.
type sharedBytes struct {
	first weak.Pointer[byte]
	size  int
}

func newFolder() *folder { return &folder{seed: maphash.MakeSeed()} }

// foldable reports whether a frame of n bytes is worth folding.
func foldable(n int) bool { return n >= foldFrom && n <= foldUpTo }

// fold returns data as other buffers holding the same bytes, mostly shared
// with frames seen before, and how many of its bytes are its own; ok is
// false when data repeats no frame known (it is then remembered).
func (f *folder) fold(data mem.BufferSlice) (folded mem.BufferSlice, own int, ok bool) {
	n := data.Len()
	var known [foldShared][]byte
	f.mu.Lock()
	for i, s := range f.shared {
		if p := s.first.Value(); p != nil {
			known[i] = unsafe.Slice(p, s.size)
		}
	}
	f.mu.Unlock()
	limit := maxDiffer(n)
	for _, b := range known {
		if b == nil || len(b) < n-limit || len(b) > n+limit {
			continue
		}
		prefix := commonPrefix(data, b)
		suffix := commonSuffix(data, b, min(n, len(b))-prefix)
		if differ := n - prefix - suffix; differ <= limit {
			f.frames.Add(1)
			return joined(b[:prefix], data, prefix, n-suffix, b[len(b)-suffix:]), differ, true
		}
	}
	head := f.head(data)
	if !f.seenBefore(n, head, limit) {
		return nil, 0, false
	}
	// The second frame that starts as one seen: its bytes, copied once,
	// are what the next ones share.
	b := data.Materialize()
	f.mu.Lock()
	f.shared[f.next] = sharedBytes{first: weak.Make(&b[0]), size: len(b)}
	f.next = (f.next + 1) % foldShared
	f.mu.Unlock()
	f.frames.Add(1)
	return mem.BufferSlice{mem.SliceBuffer(b)}, n, true
}

// seenBefore reports whether a frame of about n bytes starting as head was
// seen, and forgets it; or else remembers this one.
func (f *folder) seenBefore(n int, head uint64, limit int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.seen {
		if s.head == head && s.size >= n-limit && s.size <= n+limit {
			f.seen[i] = seenFrame{}
			return true
		}
	}
	f.seen[f.nextSeen] = seenFrame{size: n, head: head}
	f.nextSeen = (f.nextSeen + 1) % foldSeen
	return false
}

// head hashes data's first foldSketch bytes.
func (f *folder) head(data mem.BufferSlice) uint64 {
	var h maphash.Hash
	h.SetSeed(f.seed)
	left := foldSketch
	for _, buf := range data {
		b := buf.ReadOnlyData()
		if len(b) > left {
			b = b[:left]
		}
		h.Write(b)
		if left -= len(b); left == 0 {
			break
		}
	}
	return h.Sum64()
}

// joined is shared's prefix, data[from:to] copied, and shared's suffix.
func joined(prefix []byte, data mem.BufferSlice, from, to int, suffix []byte) mem.BufferSlice {
	out := make(mem.BufferSlice, 0, 3)
	if len(prefix) > 0 {
		out = append(out, mem.SliceBuffer(prefix))
	}
	if to > from {
		own := make([]byte, to-from)
		copyRange(own, data, from)
		out = append(out, mem.SliceBuffer(own))
	}
	if len(suffix) > 0 {
		out = append(out, mem.SliceBuffer(suffix))
	}
	return out
}

// copyRange fills dst with data's bytes from offset from.
func copyRange(dst []byte, data mem.BufferSlice, from int) {
	at := 0
	for _, buf := range data {
		b := buf.ReadOnlyData()
		if from >= at+len(b) {
			at += len(b)
			continue
		}
		start := max(from-at, 0)
		n := copy(dst, b[start:])
		dst = dst[n:]
		at += len(b)
		if len(dst) == 0 {
			return
		}
	}
}

// commonPrefix is how many bytes data and b start with alike.
func commonPrefix(data mem.BufferSlice, b []byte) int {
	n := 0
	for _, buf := range data {
		seg := buf.ReadOnlyData()
		m := min(len(seg), len(b)-n)
		if bytes.Equal(seg[:m], b[n:n+m]) {
			if n += m; m < len(seg) {
				return n
			}
			continue
		}
		return n + firstDifference(seg[:m], b[n:n+m])
	}
	return n
}

// commonSuffix is how many bytes data and b end with alike, at most limit.
func commonSuffix(data mem.BufferSlice, b []byte, limit int) int {
	n := 0
	for i := len(data) - 1; i >= 0 && n < limit; i-- {
		seg := data[i].ReadOnlyData()
		m := min(len(seg), limit-n)
		x, y := seg[len(seg)-m:], b[len(b)-n-m:len(b)-n]
		if bytes.Equal(x, y) {
			if n += m; m < len(seg) {
				return n
			}
			continue
		}
		return n + lastDifference(x, y)
	}
	return n
}

// firstDifference is the length of a and b's common prefix; they differ.
func firstDifference(a, b []byte) int {
	const chunk = 64
	i := 0
	for i+chunk <= len(a) && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
		i += chunk
	}
	for i < len(a) && a[i] == b[i] {
		i++
	}
	return i
}

// lastDifference is the length of a and b's common suffix; they differ.
func lastDifference(a, b []byte) int {
	const chunk = 64
	n := 0
	for n+chunk <= len(a) && bytes.Equal(a[len(a)-n-chunk:len(a)-n], b[len(b)-n-chunk:len(b)-n]) {
		n += chunk
	}
	for n < len(a) && a[len(a)-1-n] == b[len(b)-1-n] {
		n++
	}
	return n
}
