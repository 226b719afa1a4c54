package logfmt_test

import (
	"bytes"
	"log/slog"
	"regexp"
	"testing"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/internal/logfmt"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPrettyLine(t *testing.T) {
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
			l.Info("CDS v=1 ACK 3ms", "stream", 7, slog.Group(logfmt.DetailGroup, "version", "1"))
		}, `^\S+ INFO  CDS v=1 ACK 3ms stream=7\n$`},
		{"other groups are flattened", func(l *slog.Logger) { l.With("conn", 2).Info("x", slog.Group("peer", "ip", "::1")) },
			`^\S+ INFO  x conn=2 peer\.ip=::1\n$`},
		{"below level is dropped", func(l *slog.Logger) { l.Debug("hidden") }, `^$`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			tc.log(slog.New(logfmt.NewPretty(&buf, slog.LevelInfo)))
			if !regexp.MustCompile(tc.want).MatchString(buf.String()) {
				t.Errorf("got %q, want match for %s", buf.String(), tc.want)
			}
		})
	}
}
