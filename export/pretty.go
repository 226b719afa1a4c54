package export

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adstap/adstap/export/internal/shared"
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

// NewPretty writes records at level or above to w. A LogWriter takes each
// line whole and takes lines from many goroutines at once without a lock,
// so a Pretty on one takes none; any other w is written under a lock of
// the Pretty's, a line at a time.
func NewPretty(w io.Writer, level slog.Leveler) *Pretty {
	if _, ok := w.(*LogWriter); ok {
		return &Pretty{w: w, level: level}
	}
	return &Pretty{mu: &sync.Mutex{}, w: w, level: level}
}

func (h *Pretty) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// lineBufs hold lines being formatted: the live log writes one per push and
// per ACK, and a fresh buffer for each would be garbage at the same rate.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func (h *Pretty) Handle(_ context.Context, r slog.Record) error {
	bp := lineBufs.Get().(*[]byte)
	b := (*bp)[:0]
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b = t.AppendFormat(b, "15:04:05.000")
	b = append(b, ' ')
	level := r.Level.String()
	b = append(b, level...)
	for i := len(level); i < 5; i++ {
		b = append(b, ' ')
	}
	b = append(b, ' ')
	b = append(b, r.Message...)
	b = append(b, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		b = appendAttr(b, h.group, a)
		return true
	})
	b = append(b, '\n')
	var err error
	if h.mu == nil {
		_, err = h.w.Write(b)
	} else {
		shared.Taking("pretty.mu")
		h.mu.Lock()
		_, err = h.w.Write(b)
		h.mu.Unlock()
	}
	if cap(b) <= 64<<10 { // a huge line once should not pin its buffer
		*bp = b
		lineBufs.Put(bp)
	}
	return err
}

func (h *Pretty) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b []byte
	for _, a := range attrs {
		b = appendAttr(b, h.group, a)
	}
	c := *h
	c.attrs += string(b)
	return &c
}

func (h *Pretty) WithGroup(name string) slog.Handler {
	c := *h
	c.group += name + "."
	return &c
}

func appendAttr(b []byte, prefix string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key == DetailGroup {
			return b
		}
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			b = appendAttr(b, p, g)
		}
		return b
	}
	b = append(b, ' ')
	b = append(b, prefix...)
	b = append(b, a.Key...)
	b = append(b, '=')
	switch v := a.Value; v.Kind() {
	case slog.KindInt64:
		return strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		return strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindBool:
		return strconv.AppendBool(b, v.Bool())
	case slog.KindTime:
		return v.Time().AppendFormat(b, time.RFC3339Nano)
	}
	s := a.Value.String()
	if s == "" || strings.ContainsAny(s, " \"=\n\t") {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}
