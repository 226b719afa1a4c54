package export_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// lines runs events through the live log in the human format and returns its
// lines without their timestamps.
func lines(events ...track.Event) []string {
	var buf bytes.Buffer
	l := livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(&buf, slog.LevelInfo))}})
	for _, e := range eventtest.Tracked(events...) {
		l.OnEvent(e)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line != "" {
			out = append(out, line[len("15:04:05.000 "):])
		}
	}
	return out
}
