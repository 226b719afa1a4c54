package inspect

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/track"
)

// timeline writes the live log of the replay: exactly the lines `adstap
// run` writes (livelog.Log in the human format), stamped with the
// recorded times instead of the time of reading.
//
// The live log logs with slog and no time of its own, so slog stamps each
// record with time.Now(). Rather than teach the live log about replays, the
// logger's handler is wrapped: the replay is single-threaded and hands
// events to the live log one record (or tick) at a time, so the replay
// clock at that moment — the record's recorded time — is the right stamp
// for every line the live log writes for it, which is exactly what the
// tap's own clock was when it wrote the same line. Events that carry their
// own time (a full sync found complete on a later frame) are stamped like
// the tap stamped them: when they were found.
type timeline struct {
	live  *livelog.Log
	log   *slog.Logger
	clock *replayClock
}

func newTimeline(w io.Writer) *timeline {
	clock := &replayClock{w: w}
	log := slog.New(&clockHandler{next: export.NewPretty(w, slog.LevelInfo), clock: clock})
	return &timeline{live: livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: log}}), log: log, clock: clock}
}

func (t *timeline) events(st *step, evs []track.Event) {
	t.clock.now = st.At
	for _, e := range evs {
		t.live.OnEvent(e)
	}
}

func (t *timeline) note(n note) {
	t.clock.now = n.at
	t.log.Log(context.Background(), n.level, n.msg)
}

// replayClock is the time of the record being replayed. The human format
// shows the time of day only, so a line with the date goes before the
// first line and whenever the day changes.
type replayClock struct {
	now time.Time
	day string
	w   io.Writer
}

// clockHandler stamps every log record with the replay clock.
type clockHandler struct {
	next  slog.Handler
	clock *replayClock
}

func (h *clockHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *clockHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Time = h.clock.now
	if day := r.Time.Format("2006-01-02 Monday, times are UTC-07:00"); day != h.clock.day && !r.Time.IsZero() {
		h.clock.day = day
		fmt.Fprintf(h.clock.w, "--- %s ---\n", day)
	}
	return h.next.Handle(ctx, r)
}

func (h *clockHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &clockHandler{next: h.next.WithAttrs(attrs), clock: h.clock}
}

func (h *clockHandler) WithGroup(name string) slog.Handler {
	return &clockHandler{next: h.next.WithGroup(name), clock: h.clock}
}
