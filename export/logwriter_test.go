package export_test

import (
	"context"
	"slices"
	"testing"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// blockedWriter records each write; the first waits for gate.
type blockedWriter struct {
	started, gate chan struct{}
	writes        []string
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	if len(w.writes) == 0 {
		close(w.started)
		<-w.gate
	}
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// The lines logged while stderr takes a write go out together in the
// next one, in their order: a line a push is not a write a push.
func TestLogWriterGathersTheLinesOfAWrite(t *testing.T) {
	leakcheck.Check(t)
	w := &blockedWriter{started: make(chan struct{}), gate: make(chan struct{})}
	l := export.NewLogWriter(export.LogWriterConfig{Writer: w})
	l.Write([]byte("a\n"))
	<-w.started
	for _, line := range []string{"b\n", "c\n", "d\n"} {
		l.Write([]byte(line))
	}
	close(w.gate)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a\n", "b\nc\nd\n"}; !slices.Equal(w.writes, want) {
		t.Errorf("writes = %q, want %q", w.writes, want)
	}
}
