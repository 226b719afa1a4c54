package export_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestPrettyLine(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		name string
		log  func(*slog.Logger)
		want string // regexp of the whole line
	}{
		{"message and attrs", func(l *slog.Logger) { l.Info("adstap relaying", "listen", "127.0.0.1:15100", "tls", false) },
			`^\d\d:\d\d:\d\d\.\d{3} INFO  adstap relaying listen=127\.0\.0\.1:15100 tls=false\n$`},
		{"quoted values", func(l *slog.Logger) { l.Warn("nack", "msg", `bad "cluster"`) },
			`^\S+ WARN  nack msg="bad \\"cluster\\""\n$`},
		{"detail group is for machines only", func(l *slog.Logger) {
			l.Info("CDS v=1 ACK 3ms", "stream", 7, slog.Group(export.DetailGroup, "version", "1"))
		}, `^\S+ INFO  CDS v=1 ACK 3ms stream=7\n$`},
		{"other groups are flattened", func(l *slog.Logger) { l.With("conn", 2).Info("x", slog.Group("peer", "ip", "::1")) },
			`^\S+ INFO  x conn=2 peer\.ip=::1\n$`},
		{"below level is dropped", func(l *slog.Logger) { l.Debug("hidden") }, `^$`},
		{"numbers, booleans, times and durations", func(l *slog.Logger) {
			l.Error("x", "n", -42, "u", uint64(7), "ok", true, "f", 1.5, "d", 1500*time.Millisecond,
				"at", time.Date(2026, 11, 30, 9, 0, 0, 5, time.UTC), "err", errors.New("no such cluster"), "empty", "")
		}, `^\S+ ERROR x n=-42 u=7 ok=true f=1\.5 d=1\.5s at=2026-11-30T09:00:00\.000000005Z err="no such cluster" empty=""\n$`},
		{"a level past WARN keeps its name", func(l *slog.Logger) { l.Log(context.Background(), slog.LevelWarn+2, "x") },
			`^\S+ WARN\+2 x\n$`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.log(slog.New(export.NewPretty(&buf, slog.LevelInfo)))
			if !regexp.MustCompile(tc.want).MatchString(buf.String()) {
				t.Errorf("got %q, want match for %s", buf.String(), tc.want)
			}
		})
	}
}

// TestPrettyLinesAreIndependent: lines are built in reused buffers; each
// line written must still be whole and its own.
func TestPrettyLinesAreIndependent(t *testing.T) {
	leakcheck.Check(t)
	var buf bytes.Buffer
	l := slog.New(export.NewPretty(&buf, slog.LevelInfo))
	l.Info("a long first line", "pad", string(bytes.Repeat([]byte("x"), 2000)))
	l.Info("short", "n", 1)
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 2 || !regexp.MustCompile(`^\S+ INFO  short n=1$`).Match(lines[1]) {
		t.Errorf("got %q, want two lines, the second \"short n=1\"", buf.String())
	}
}

func BenchmarkPrettyLine(b *testing.B) {
	l := slog.New(export.NewPretty(io.Discard, slog.LevelInfo))
	b.ReportAllocs()
	for b.Loop() {
		l.LogAttrs(context.Background(), slog.LevelInfo, "EDS v=2026-11-30T09:00:00Z/7 ACK 3.1ms +0 -0 ~1 =0",
			slog.Uint64("stream", 7), slog.String("node", "sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local"))
	}
}
