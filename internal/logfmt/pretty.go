// Package logfmt is adstap's human log format: one short line per record.
package logfmt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DetailGroup names the attribute group that carries a record's facts for
// machines. The human format leaves it out, since the message already says
// the same thing in words; the JSON format keeps it.
const DetailGroup = "xds"

// Pretty is a slog.Handler that writes "15:04:05.000 LEVEL message k=v ...".
type Pretty struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	attrs string // preformatted attributes from WithAttrs
	group string // current group prefix from WithGroup
}

var _ slog.Handler = (*Pretty)(nil)

// NewPretty writes records at level or above to w.
func NewPretty(w io.Writer, level slog.Leveler) *Pretty {
	return &Pretty{mu: &sync.Mutex{}, w: w, level: level}
}

func (h *Pretty) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *Pretty) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.Format("15:04:05.000"))
	b.WriteByte(' ')
	fmt.Fprintf(&b, "%-5s ", r.Level.String())
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *Pretty) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range attrs {
		writeAttr(&b, h.group, a)
	}
	c := *h
	c.attrs += b.String()
	return &c
}

func (h *Pretty) WithGroup(name string) slog.Handler {
	c := *h
	c.group += name + "."
	return &c
}

func writeAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key == DetailGroup {
			return
		}
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			writeAttr(b, p, g)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(prefix)
	b.WriteString(a.Key)
	b.WriteByte('=')
	s := a.Value.String()
	if a.Value.Kind() == slog.KindTime {
		s = a.Value.Time().Format(time.RFC3339Nano)
	}
	if s == "" || strings.ContainsAny(s, " \"=\n\t") {
		s = strconv.Quote(s)
	}
	b.WriteString(s)
}
