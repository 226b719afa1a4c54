package codec

import (
	"fmt"
	"sync"
	"testing"
)

// recentText hands out the string it made for the same bytes a moment ago,
// without allocating; any bytes give their own text, whatever shares a slot.
func TestRecentText(t *testing.T) {
	version := []byte("2026-12-05T20:14:36Z/42")
	first := recentText(version)
	if first != string(version) {
		t.Fatalf("recentText = %q, want %q", first, version)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if recentText(version) != first {
			t.Fatal("a different text for the same bytes")
		}
	}); allocs != 0 {
		t.Errorf("%v allocations for bytes just seen, want 0", allocs)
	}
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"nonce-\xff-1", "nonce-\uFFFD-1"},
		{"nonce-\xff-1", "nonce-\uFFFD-1"}, // invalid UTF-8 is never kept, so never handed out as is
		{string(make([]byte, maxRecent+1)), string(make([]byte, maxRecent+1))},
	} {
		if got := recentText([]byte(tc.in)); got != tc.want {
			t.Errorf("recentText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Far more values than slots, from several goroutines at once (-race):
	// each gets its own text, taking turns in the slots they share.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 4 * recentSlots {
				want := fmt.Sprintf("nonce-%d-%d", g, i%(recentSlots+7))
				if got := recentText([]byte(want)); got != want {
					t.Errorf("recentText(%q) = %q", want, got)
					return
				}
			}
		})
	}
	wg.Wait()
}
