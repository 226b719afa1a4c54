package inspect

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/feed"
	"github.com/adstap/adstap/track"
)

// step is one record (or tick) of the replay with what came of it.
type step struct {
	At   time.Time       // the replay clock: the record's time, or the tick's
	Rec  *capture.Record // nil for a tick or a close the replay made up
	Req  *codec.Request  // a decoded request frame
	Resp *codec.Response // a decoded response frame, valid during the call only
	// Delta is the protocol of the frame's stream.
	Delta bool
}

// consumer is a view of the replay: the timeline, the summary, the push
// diff, the NACK list.
type consumer interface {
	events(st *step, evs []track.Event)
	note(n note)
}

// acceptor is a consumer that follows what clients accepted: it takes the
// tracker's accepted pushes (track.Tracker.TakeAccepted) before any
// stream, and releases the lease of each it is handed; nil when it takes
// none after all.
type acceptor interface {
	take(tr *track.Tracker) *track.Taker
}

// replayer feeds capture records to a fresh tracker, ticking it as the
// recorded time passes, so that timeouts and the end of episodes happen as
// they did in the tap.
type replayer struct {
	tr      *track.Tracker
	horizon time.Duration
	out     []consumer
	streams map[uint64]*replayStream
	resp    codec.Response

	lastTick time.Time
	latest   time.Time // the latest record time so far

	// At the top of every file but a capture's first, the writer repeats
	// the streams still open (Reopened). Until this header block ends,
	// those are collected: the streams open in the tracker that are not
	// among them did not survive into this file, and those unknown to the
	// tracker began before the files read — unless the stream's own open
	// record made the writer rotate, in which case that record follows
	// the block at once.
	files     int
	inHeader  bool
	reopened  map[uint64]bool
	unknown   []*capture.Record // reopened streams the tracker does not know, in order
	prevEnd   time.Time         // the latest record time of the previous file
	fileNames []string
}

type replayStream struct {
	meta  track.StreamMeta
	delta bool
	// partial: the stream began before the first file read.
	partial bool
}

func newReplayer(cfg track.Config, out ...consumer) *replayer {
	cfg.MaxNames = 1 << 30 // every name, not a sample: inspect is for the details
	r := &replayer{
		tr:       track.New(cfg),
		horizon:  horizon(cfg),
		out:      out,
		streams:  map[uint64]*replayStream{},
		reopened: map[uint64]bool{},
	}
	for _, c := range out {
		if a, ok := c.(acceptor); ok {
			a.take(r.tr)
		}
	}
	return r
}

// horizon is how long after the last record time can still bring events
// (a push timing out, a storm ending, a full sync settling): ticking
// further, until the next record, would find nothing.
func horizon(cfg track.Config) time.Duration {
	d := track.DefaultConfig()
	longest := time.Duration(0)
	for _, v := range []struct{ set, def time.Duration }{
		{cfg.PushTimeout, d.PushTimeout}, {cfg.NACKStormWindow, d.NACKStormWindow},
		{cfg.RepeatedFullSyncWindow, d.RepeatedFullSyncWindow}, {cfg.HerdWindow, d.HerdWindow},
		{cfg.FullSyncSettle, d.FullSyncSettle},
	} {
		x := v.set
		if x <= 0 {
			x = v.def
		}
		longest = max(longest, x)
	}
	return longest + 2*time.Second
}

func (r *replayer) emit(st *step, evs []track.Event) {
	if len(evs) == 0 {
		return
	}
	for _, c := range r.out {
		c.events(st, evs)
	}
}

func (r *replayer) note(at time.Time, level slog.Level, format string, a ...any) {
	n := note{at: at, level: level, msg: fmt.Sprintf(format, a...)}
	for _, c := range r.out {
		c.note(n)
	}
}

// fileStart begins a file: rec is its first record, of kind capture.
func (r *replayer) fileStart(name string, rec *capture.Record) {
	if r.inHeader {
		r.endHeader(rec)
	}
	r.files++
	r.fileNames = append(r.fileNames, name)
	r.inHeader = true
	clear(r.reopened)
	r.prevEnd = r.latest
	r.advance(rec.Time)
	r.seen(rec.Time)
	r.note(rec.Time, slog.LevelInfo, "capture file %s begins (adstap %s, upstream %s, format %d)",
		name, orDash(rec.Adstap), orDash(rec.Upstream), rec.Format)
}

// record replays one record after a file's first.
func (r *replayer) record(rec *capture.Record) {
	if r.inHeader && !(rec.Kind == capture.KindOpen && rec.Reopened) {
		r.endHeader(rec)
	}
	r.advance(rec.Time)
	switch rec.Kind {
	case capture.KindOpen:
		r.open(rec)
	case capture.KindFrame:
		r.frame(rec)
	case capture.KindClose:
		r.close(rec)
	case capture.KindGap:
		if s := r.streams[rec.Stream]; s != nil {
			r.emit(&step{At: rec.Time, Rec: rec, Delta: s.delta}, r.tr.Gap(rec.Stream, rec.Time, rec.Skipped))
		}
	case capture.KindCapture:
		// A capture record inside a file: two files concatenated.
		r.fileStart(r.fileNames[len(r.fileNames)-1]+" (again)", rec)
	}
	r.seen(rec.Time)
}

func (r *replayer) seen(t time.Time) {
	if t.After(r.latest) {
		r.latest = t
	}
}

// endHeader ends a file's header block (next is the first record after it).
// It opens the repeated streams the tracker did not know, and closes the
// streams that were open at the end of the previous file but are not
// repeated at the top of this one: the previous file was the last of its
// tap's run (or a crash cut it), so their end is not in the files. The one
// exception is a stream whose close record made the writer rotate: that
// close is the first record after the header.
func (r *replayer) endHeader(next *capture.Record) {
	r.inHeader = false
	unknown := r.unknown
	r.unknown = nil
	for _, rec := range unknown {
		if next.Kind == capture.KindOpen && !next.Reopened && next.Stream == rec.Stream && next.Time.Equal(rec.Time) {
			continue // its own open record is next
		}
		r.open(rec)
	}
	for _, id := range sortedIDs(r.streams) {
		if r.reopened[id] || (next.Kind == capture.KindClose && next.Stream == id) {
			continue
		}
		at := r.prevEnd
		evs := r.tr.CloseStream(id, at, uint32(codes.Unknown), "the capture has no end for this stream (the tap stopped, or the file was cut)")
		delete(r.streams, id)
		r.emit(&step{At: at}, evs)
	}
}

func (r *replayer) open(rec *capture.Record) {
	s := r.streams[rec.Stream]
	switch {
	case rec.Reopened && s != nil:
		r.reopened[rec.Stream] = true
		return
	case rec.Reopened && r.inHeader:
		r.reopened[rec.Stream] = true
		c := *rec
		r.unknown = append(r.unknown, &c)
		return
	}
	proto := codec.Protocol(rec.Protocol)
	if proto == "" {
		proto = codec.ProtocolOf(rec.Method)
	}
	meta := track.StreamMeta{ID: rec.Stream, ConnID: rec.Conn, Method: rec.Method, Protocol: proto, Peer: rec.Peer, OpenedAt: rec.Time}
	s = &replayStream{meta: meta, delta: proto == codec.Delta, partial: rec.Reopened}
	if s.partial {
		r.note(rec.Time, slog.LevelWarn, "stream %d began before the first file read (at %s): what it said before is not in these files, so its counts start late",
			rec.Stream, rec.Time.Format(time.RFC3339Nano))
	}
	evs := r.tr.OpenStream(meta)
	r.streams[rec.Stream] = s
	r.emit(&step{At: rec.Time, Rec: rec, Delta: s.delta}, evs)
}

// errLeftOut is what a response the capture could not redact becomes: the
// writer keeps its size and time, not its bytes.
var errLeftOut = errors.New("the response is not in the capture: it could not be redacted safely")

func (r *replayer) frame(rec *capture.Record) {
	s := r.streams[rec.Stream]
	if s == nil || s.meta.Protocol == codec.Opaque {
		return
	}
	st := &step{At: rec.Time, Rec: rec, Delta: s.delta}
	dir, ok := codec.ParseDirection(rec.Direction)
	if !ok {
		return
	}
	response := dir == codec.DirectionResponse
	if response && len(rec.Message) == 0 && rec.Redacted {
		r.emit(st, r.tr.DecodeFailed(rec.Stream, rec.Time, dir, errLeftOut))
		return
	}
	// The tracker keeps a response's bytes until the push's answer, so that
	// a NACK names the Istio objects it rejected (--nacks).
	evs, d := feed.Track(r.tr, &r.resp, feed.Frame{Stream: rec.Stream, At: rec.Time, Response: response, Delta: s.delta,
		Data: mem.BufferSlice{mem.SliceBuffer(rec.Message)}, Size: rec.Size})
	st.Req, st.Resp = d.Request, d.Response
	r.emit(st, evs)
	if d.Response != nil {
		r.resp.Reset()
	}
}

func (r *replayer) close(rec *capture.Record) {
	s := r.streams[rec.Stream]
	if s == nil {
		return
	}
	evs := r.tr.CloseStream(rec.Stream, rec.Time, codeOf(rec.Code), rec.StatusMessage)
	delete(r.streams, rec.Stream)
	r.emit(&step{At: rec.Time, Rec: rec, Delta: s.delta}, evs)
}

// advance ticks the tracker once per recorded second up to t, as the tap's
// ticker did, skipping the stretches in which nothing can happen.
func (r *replayer) advance(t time.Time) {
	if r.lastTick.IsZero() {
		r.lastTick = t
		return
	}
	for {
		next := r.lastTick.Add(time.Second)
		if next.After(t) {
			return
		}
		if next.After(r.latest.Add(r.horizon)) {
			// Keep the ticks' phase, as a ticker would.
			next = r.lastTick.Add(t.Sub(r.lastTick).Truncate(time.Second))
		}
		r.lastTick = next
		r.emit(&step{At: next}, r.tr.Tick(next))
	}
}

// idle lets time pass while a followed file does not grow, so that a push
// left unanswered times out as it would in the tap. The clock never goes
// back before the records already read.
func (r *replayer) idle(now time.Time) {
	if now.After(r.latest) {
		r.advance(now.In(r.latest.Location())) // stamped like the records
	}
}

// codeOf reads back a gRPC code as the capture writes it (codes.Code.String).
func codeOf(name string) uint32 {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return uint32(c)
		}
	}
	if n, ok := strings.CutPrefix(name, "Code("); ok {
		if v, err := strconv.ParseUint(strings.TrimSuffix(n, ")"), 10, 32); err == nil {
			return uint32(v)
		}
	}
	return uint32(codes.Unknown)
}

// note is something the replay itself has to say (a file begins, a stream
// began before the files), which only the timeline shows.
type note struct {
	at    time.Time
	level slog.Level
	msg   string
}

// sortedIDs returns a map's uint64 keys in order.
func sortedIDs[V any](m map[uint64]V) []uint64 {
	return slices.Sorted(maps.Keys(m))
}
