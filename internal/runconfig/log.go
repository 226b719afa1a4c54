package runconfig

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/adstap/adstap/export"
)

// logQueueBytes bounds the log lines waiting for the log's destination.
const logQueueBytes = 4 << 20

// NewLog is the tap's log (--log-level, --log-format) on w, through an
// export.LogWriter: a destination that blocks costs log lines, counted,
// never a wait in the relay or the tracker. Close the writer last
// (CloseLog), to write out what waits.
func NewLog(w io.Writer, level, format string) (*slog.Logger, *export.LogWriter, error) {
	if _, err := NewLogger(io.Discard, level, format); err != nil {
		return nil, nil, err
	}
	out := export.NewLogWriter(export.LogWriterConfig{OutputConfig: export.OutputConfig{QueueBytes: logQueueBytes}, Writer: w, Lost: func(n uint64) []byte {
		// Said in the log's own format, once the destination takes lines again.
		var b bytes.Buffer
		l, _ := NewLogger(&b, level, format)
		l.Warn(fmt.Sprintf("log: %d lines dropped while stderr was blocked", n), "dropped", n, "metric", `adstap_output_dropped_total{output="log"}`)
		return b.Bytes()
	}})
	log, _ := NewLogger(out, level, format)
	return log, out, nil
}

// CloseLog writes out the log lines that wait, for at most d.
func CloseLog(out *export.LogWriter, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out.Close(ctx)
}

// NewLogger is a logger writing to w in place, at level, in format.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(export.NewPretty(w, lv)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
