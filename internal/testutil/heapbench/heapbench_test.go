package heapbench_test

import (
	"testing"

	"github.com/adstap/adstap/internal/testutil/heapbench"
)

// A benchmark whose build keeps 64 slices of 64 KiB sees the live heap grow
// by about 4 MiB, and check sees the very slices built.
func BenchmarkGrownCountsWhatBuildKeeps(b *testing.B) {
	const n, size = 64, 64 << 10
	for b.Loop() {
		checked := false
		grown := heapbench.Grown(b, func() [][]byte {
			held := make([][]byte, n)
			for i := range held {
				held[i] = make([]byte, size)
			}
			return held
		}, func(held [][]byte) {
			checked = len(held) == n && len(held[0]) == size
		})
		if !checked {
			b.Fatal("check did not see what build returned")
		}
		// The rest of the heap may shrink by a few KB between the two
		// collections (the runtime's and the testing package's own).
		if want := int64(n * size); grown < want-want/64 || grown > want+want/8 {
			b.Fatalf("live heap grew %d bytes, want about %d", grown, want)
		}
	}
}

func TestGrownCountsWhatBuildKeeps(t *testing.T) {
	if r := testing.Benchmark(BenchmarkGrownCountsWhatBuildKeeps); r.N == 0 {
		t.Fatal("the benchmark failed")
	}
}
