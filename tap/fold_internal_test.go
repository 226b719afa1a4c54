package tap

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"testing"

	"google.golang.org/grpc/mem"
)

// segmented cuts b into buffers of the given sizes (the last takes the rest).
func segmented(b []byte, sizes ...int) mem.BufferSlice {
	var out mem.BufferSlice
	for _, n := range sizes {
		n = min(n, len(b))
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	if len(b) > 0 {
		out = append(out, mem.SliceBuffer(b))
	}
	return out
}

func randomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestCommonPrefixAndSuffix(t *testing.T) {
	const n = 40 << 10
	shared := randomBytes(1, n)
	for _, tc := range []struct {
		name                   string
		change                 []int // offsets changed in the frame
		sizes                  []int // its buffers
		extra                  int   // bytes the frame has beyond shared's length, before its last 10
		wantPrefix, wantSuffix int
	}{
		{name: "equal, one buffer", sizes: nil, wantPrefix: n, wantSuffix: 0},
		{name: "equal, buffers", sizes: []int{16 << 10, 16 << 10}, wantPrefix: n, wantSuffix: 0},
		{name: "first byte", change: []int{0}, sizes: []int{100, 16 << 10}, wantPrefix: 0, wantSuffix: n - 1},
		{name: "last byte", change: []int{n - 1}, sizes: []int{16 << 10}, wantPrefix: n - 1, wantSuffix: 0},
		{name: "at a buffer's edges", change: []int{16<<10 - 1, 16 << 10}, sizes: []int{16 << 10}, wantPrefix: 16<<10 - 1, wantSuffix: n - 16<<10 - 1},
		{name: "a nonce near the end", change: []int{n - 300, n - 290}, sizes: []int{16 << 10, 16 << 10}, wantPrefix: n - 300, wantSuffix: 289},
		{name: "longer by a few", extra: 5, sizes: []int{7, 16 << 10}, wantPrefix: n - 10, wantSuffix: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := bytes.Clone(shared)
			for _, at := range tc.change {
				frame[at] ^= 0xff
			}
			if tc.extra > 0 {
				frame = append(frame[:n-10:n-10], append(bytes.Repeat([]byte{0}, tc.extra), shared[n-10:]...)...)
				frame[n-10] = shared[n-10] ^ 1 // differs where it grew
			}
			data := segmented(frame, tc.sizes...)
			prefix := commonPrefix(data, shared)
			suffix := commonSuffix(data, shared, min(len(frame), n)-prefix)
			if prefix != tc.wantPrefix || suffix != tc.wantSuffix {
				t.Errorf("prefix, suffix = %d, %d, want %d, %d", prefix, suffix, tc.wantPrefix, tc.wantSuffix)
			}
			got := joined(shared[:prefix], data, prefix, len(frame)-suffix, shared[n-suffix:])
			if !bytes.Equal(got.Materialize(), frame) {
				t.Error("joined holds other bytes than the frame")
			}
		})
	}
}

// The folder folds the second frame that starts as one seen into a copy of
// its own, and the frames after into that copy, where they differ in a few
// bytes only; a frame that differs more, or starts otherwise, is not folded.
func TestFolderFoldsFramesThatRepeatOneSeen(t *testing.T) {
	const n = 64 << 10
	push := randomBytes(2, n)
	withNonce := func(nonce byte, at ...int) []byte {
		b := bytes.Clone(push)
		for _, i := range at {
			b[i] = nonce
		}
		return b
	}
	f := newFolder()
	fold := func(frame []byte) (mem.BufferSlice, int, bool) {
		t.Helper()
		got, own, ok := f.fold(segmented(frame, 16<<10, 16<<10, 16<<10))
		if ok && !bytes.Equal(got.Materialize(), frame) {
			t.Fatal("folded into other bytes than the frame's")
		}
		return got, own, ok
	}
	if _, _, ok := fold(withNonce(1, n-100)); ok {
		t.Fatal("the first frame was folded, with nothing seen before")
	}
	second, own, ok := fold(withNonce(2, n-100))
	if !ok || own != n || len(second) != 1 {
		t.Fatalf("the second frame: folded %v, own %d bytes in %d buffers, want its copy (%d bytes, one buffer)", ok, own, len(second), n)
	}
	copied := second[0].ReadOnlyData()
	third, own, ok := fold(withNonce(3, n-100))
	if !ok || own != 1 {
		t.Fatalf("the third frame: folded %v, own %d bytes, want 1 (its nonce)", ok, own)
	}
	if &third[0].ReadOnlyData()[0] != &copied[0] {
		t.Error("the third frame does not share the second's copy")
	}
	if _, _, ok := fold(withNonce(4, n/2, n/2+maxDiffer(n)+1)); ok {
		t.Error("a frame differing in more than maxDiffer bytes was folded")
	}
	if _, _, ok := fold(randomBytes(3, n)); ok {
		t.Error("a frame that starts otherwise was folded")
	}
	if got := f.frames.Load(); got != 2 {
		t.Errorf("%d frames counted as folded, want 2", got)
	}
	runtime.KeepAlive(second)
}

// The folder keeps no frame's bytes alive: once no frame folded into them is
// held, they are collected, and a frame that repeats them is remembered anew.
func TestFolderLetsSharedBytesGo(t *testing.T) {
	const n = 64 << 10
	push := randomBytes(4, n)
	f := newFolder()
	f.fold(segmented(push))
	if _, _, ok := f.fold(segmented(bytes.Clone(push))); !ok {
		t.Fatal("the second frame was not folded")
	}
	for range 5 {
		runtime.GC()
	}
	if _, _, ok := f.fold(segmented(bytes.Clone(push))); ok {
		t.Error("a frame folded into bytes no frame held any more")
	}
}

// BenchmarkFold is what the relay's goroutine pays, once it has forwarded
// a frame, to fold a 212 KB push (W6's) into the copy a push before it left.
func BenchmarkFold(b *testing.B) {
	const n = 212 << 10
	push := randomBytes(5, n)
	f := newFolder()
	f.fold(segmented(push))
	kept, _, _ := f.fold(segmented(bytes.Clone(push)))
	frame := bytes.Clone(push)
	frame[n-300] ^= 1
	data := segmented(frame, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10, 16<<10)
	b.SetBytes(n)
	for b.Loop() {
		if _, own, ok := f.fold(data); !ok || own != 1 {
			b.Fatalf("folded %v, own %d bytes", ok, own)
		}
	}
	runtime.KeepAlive(kept)
}
