package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConcurrentWrites: writers and a reader at once (run with -race); every
// line written is there at the end, whole.
func TestConcurrentWrites(t *testing.T) {
	leakcheck.Check(t)
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("line\n"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != 800 {
		t.Errorf("%d lines, want 800", got)
	}
}
