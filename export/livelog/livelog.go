// Package livelog is the live log: a readable line per push outcome, stream change and detector event, its facts attached for the JSON format.
package livelog

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// Log writes one readable line per push outcome, stream change and
// detector event, e.g.
//
//	CDS v=2026-11-30T09:00:00Z/42 +2 -0 ~1 =117 1.2MB node=sidecar~10.0.0.1~app.default ACK 14ms
//
// Each record also carries its facts as attributes in the
// export.DetailGroup group, for --log-format=json.
//
// A control plane stuck re-sending a rejected push (go-control-plane's
// snapshot cache does it thousands of times a second) would bury everything
// else: a NACK identical to the previous one of its stream and type is
// written at most once per repeatEvery, with the count of those left out.
//
// It is the log output (export.LogOutput): what it loses is what its
// Writer dropped.
type Log struct {
	log *slog.Logger
	// detail says whether the handler writes the facts
	// (export.DetailGroup). The human format (export.Pretty) leaves them
	// out, so they are not made for it: a push's facts were most of the
	// live log's garbage.
	detail      bool
	repeatEvery time.Duration
	// out, when set, runs the lines that read a NACK's Istio objects on
	// the log's own goroutine (Config.Writer), and counts what it dropped.
	out Writer
}

// logStream is what the live log keeps of a stream, on the stream itself
// (track.OutputState): no lock of the live log's is shared by its streams.
type logStream struct {
	mu      sync.Mutex
	repeats map[string]*repeat // by type URL
	// deferred counts the stream's lines waiting on the log's goroutine
	// (Config.Writer); while there are any, its next lines wait there too, so
	// that they keep their order.
	deferred atomic.Int32
}

// repeat is the last NACK line written for a stream and type.
type repeat struct {
	version, message string
	written          time.Time
	suppressed       int
}

// defaultRepeatEvery is how often an identical NACK is written again.
const defaultRepeatEvery = 5 * time.Second

var (
	_ track.Sink    = (*Log)(nil)
	_ export.Output = (*Log)(nil)
	_ Writer        = (*export.LogWriter)(nil)
)

// Config shapes the live log.
type Config struct {
	// OutputConfig.Logger is where the lines go, the tap's log (nil
	// discards them); its QueueBytes is unused: the lines wait in Writer's
	// queue, whose bound its owner set.
	export.OutputConfig
	// Writer, when set, is the way out that Logger writes through
	// (export.LogWriter). The lines it dropped are the live log's
	// (Dropped), and the lines that name the Istio objects a NACK rejected
	// are written on its goroutine (Writer.Later), which reads the objects
	// (origin.Of) there rather than on the observation worker that hands
	// the live log its events; the lines of the stream that follow wait
	// there too, so the stream's lines keep their order. Without it
	// (inspect, tests) every line is written where its event is handled, and
	// none is dropped.
	Writer Writer
}

// Writer is what the live log needs of its way out; export.LogWriter is
// it.
type Writer interface {
	// Later runs f on the writer's goroutine after the lines queued
	// before it, or drops it, counted as a line, and says false.
	Later(f func()) bool
	// Dropped counts the lines dropped.
	Dropped() uint64
}

// New logs to cfg.Logger.
func New(cfg Config) *Log {
	l := cfg.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	_, human := l.Handler().(*export.Pretty)
	return &Log{log: l, detail: !human, repeatEvery: defaultRepeatEvery, out: cfg.Writer}
}

// Name is export.LogOutput.
func (l *Log) Name() string { return export.LogOutput }

// Dropped counts the lines its Writer dropped, since the writer was made:
// the live log's and those of every other logger that writes through it
// (the pipeline's, the tap's), which it cannot tell apart. 0 without a
// Writer: a line written in place is never dropped.
func (l *Log) Dropped() uint64 {
	if l.out == nil {
		return 0
	}
	return l.out.Dropped()
}

// Close has nothing to write out: the live log keeps no line of its own.
// Its lines wait in its Writer, which carries the other loggers' lines too
// and is closed by its owner after the last of them; Close leaves it open.
func (l *Log) Close(context.Context) error { return nil }

// OnEvent logs e if it is worth a line.
func (l *Log) OnEvent(e track.Event) {
	ref, rejected, lined := streamOf(e)
	if !lined {
		return
	}
	st := track.OutputState[logStream](ref, l)
	pe, isPush := e.(track.PushEnded)
	suppressed := 0
	if isPush {
		// Decided here, in the stream's event order; only the line may wait.
		var write bool
		if suppressed, write = l.throttle(st, pe); !write {
			return
		}
	}
	if l.out == nil || (rejected == nil && (st == nil || st.deferred.Load() == 0)) {
		if isPush {
			l.pushEnded(pe, suppressed)
		} else {
			l.write(e)
		}
		return
	}
	l.writeLater(st, rejected, e, suppressed)
}

// writeLater writes e's line on the log's goroutine (Config.Writer), after
// claiming what its NACK rejected, so that the objects are read there. Apart
// from OnEvent, so that only a line that waits costs its closure.
func (l *Log) writeLater(st *logStream, rejected *track.Rejected, e track.Event, suppressed int) {
	line := func() {
		if pe, ok := e.(track.PushEnded); ok {
			l.pushEnded(pe, suppressed)
		} else {
			l.write(e)
		}
	}
	origin.Claim(rejected)
	if st == nil {
		l.out.Later(line)
		return
	}
	st.deferred.Add(1)
	if !l.out.Later(func() {
		line()
		st.deferred.Add(-1)
	}) {
		st.deferred.Add(-1) // dropped, and counted, as a line
	}
}

// streamOf is the stream an event is about, if any, what a NACK it carries
// rejected, if its bytes are at hand to read, and whether the event may get
// a line.
func streamOf(e track.Event) (ref *track.StreamRef, r *track.Rejected, lined bool) {
	switch e := e.(type) {
	case track.PushSent:
		return nil, nil, false
	case track.RequestSeen:
		if e.Kind != track.KindStale && e.Kind != track.KindUnobserved {
			return nil, nil, false
		}
	case track.PushEnded:
		r = e.Rejected
	case track.LateAnswer:
		r = e.Rejected
	}
	if r != nil && r.NotKept != "" {
		r = nil
	}
	return track.RefOf(e), r, true
}

// write logs e, but for a push's outcome (pushEnded).
func (l *Log) write(e track.Event) {
	switch e := e.(type) {
	case track.StreamOpened:
		l.line(slog.LevelInfo, fmt.Sprintf("stream %d open: %s %s from %s", e.Stream.ID, e.Stream.Protocol, shortMethod(e.Stream.Method), e.Stream.Peer),
			"stream", e.Stream.ID, "conn", e.Stream.ConnID, "protocol", string(e.Stream.Protocol), "method", e.Stream.Method, "peer", e.Stream.Peer)
	case track.StreamClosed:
		l.line(slog.LevelInfo, fmt.Sprintf("stream %d closed after %s: %s %s%s", e.Stream.ID, e.At.Sub(e.Stream.OpenedAt).Round(time.Millisecond),
			codeName(e.Code), quoteIf(e.Message), shared.NodeSuffix(e.Node.ID)),
			"stream", e.Stream.ID, "node", e.Node.ID, "code", codeName(e.Code), "message", e.Message)
	case track.LateAnswer:
		source := ""
		facts := []any{"stream", e.Push.StreamID, "type", e.Push.Type, "version", e.Push.Version, "result", string(e.Result), "latency_ms", shared.Ms(e.Latency)}
		if x := origin.Of(e.Rejected); x != nil {
			source = " — " + x.Summary()
			facts = append(facts, "istio_config", shared.ObjectPaths(x), "source", x.Summary())
		}
		l.line(slog.LevelWarn, fmt.Sprintf("%s v=%s answered late: %s after %s%s%s", shared.TypeLabel(e.Push.TypeURL), e.Push.Version,
			strings.ToUpper(string(e.Result)), e.Latency.Round(time.Millisecond), shared.NodeSuffix(e.Push.Node.ID), source), facts...)
	case track.RequestSeen:
		switch e.Kind {
		case track.KindStale:
			l.line(slog.LevelInfo, fmt.Sprintf("%s stale nonce %s on stream %d (the client answered an older push)%s", shared.TypeLabel(e.TypeURL), e.Nonce, e.StreamID, shared.NodeSuffix(e.Node.ID)),
				"stream", e.StreamID, "type", codec.ShortType(e.TypeURL), "nonce", e.Nonce, "kind", string(e.Kind))
		case track.KindUnobserved:
			l.line(slog.LevelInfo, fmt.Sprintf("%s answer to nonce %s on stream %d, a push adstap did not observe (frames were skipped)%s", shared.TypeLabel(e.TypeURL), e.Nonce, e.StreamID, shared.NodeSuffix(e.Node.ID)),
				"stream", e.StreamID, "type", codec.ShortType(e.TypeURL), "nonce", e.Nonce, "kind", string(e.Kind))
		}
	case track.FullPush:
		l.fullPush(e)
	case track.FullSyncComplete:
		var types []string
		for _, t := range e.Types {
			types = append(types, shared.TypeLabel(t))
		}
		l.line(slog.LevelInfo, fmt.Sprintf("stream %d full sync complete in %s (%s)%s", e.StreamID, e.Elapsed.Round(time.Millisecond), strings.Join(types, " "), shared.NodeSuffix(e.Node.ID)),
			"stream", e.StreamID, "node", e.Node.ID, "full_sync_seconds", e.Elapsed.Seconds(), "types", e.Types)
	case track.DetectorStarted:
		l.line(slog.LevelWarn, fmt.Sprintf("%s started: %s", export.DetectorName(e.Detector), e.Detail),
			"detector", e.Detector, "key", e.Key, "stream", e.StreamID, "node", e.Node, "type_url", e.TypeURL, "count", e.Count)
	case track.DetectorEnded:
		l.line(slog.LevelInfo, fmt.Sprintf("%s ended: %s after %s (%d in all)", export.DetectorName(e.Detector), e.Key, e.Duration.Round(time.Second), e.Count),
			"detector", e.Detector, "key", e.Key, "stream", e.StreamID, "node", e.Node, "type_url", e.TypeURL, "count", e.Count, "duration_seconds", e.Duration.Seconds())
	case track.UpstreamConnected:
		c := e.UpstreamConnect
		phases := fmt.Sprintf("dns %s, tcp %s, tls %s", export.Latency(c.DNS), export.Latency(c.TCP), export.Latency(c.TLS))
		if c.Err != nil {
			l.line(slog.LevelWarn, fmt.Sprintf("upstream %s unreachable for connection %d: %s failed (%s): %v", c.Upstream, c.ConnID, c.FailedPhase, phases, c.Err),
				"conn", c.ConnID, "upstream", c.Upstream, "failed_phase", c.FailedPhase, "error", c.Err.Error(),
				"dns_ms", shared.Ms(c.DNS), "tcp_ms", shared.Ms(c.TCP), "tls_ms", shared.Ms(c.TLS))
			return
		}
		l.line(slog.LevelInfo, fmt.Sprintf("upstream %s connected for connection %d: %s", c.Upstream, c.ConnID, phases),
			"conn", c.ConnID, "upstream", c.Upstream, "dns_ms", shared.Ms(c.DNS), "tcp_ms", shared.Ms(c.TCP), "tls_ms", shared.Ms(c.TLS))
	case track.DecodeError:
		l.line(slog.LevelWarn, fmt.Sprintf("stream %d: undecodable %s relayed unchanged: %v", e.StreamID, e.Direction, e.Err),
			"stream", e.StreamID, "direction", e.Direction.String(), "error", e.Err.Error())
	case track.ObservationGap:
		l.line(slog.LevelWarn, fmt.Sprintf("stream %d: %d frames relayed but not observed (observation queue full); its state may be off until the next full push", e.StreamID, e.Skipped),
			"stream", e.StreamID, "skipped", e.Skipped)
	}
}

func (l *Log) pushEnded(e track.PushEnded, suppressed int) {
	p := e.Push
	level := slog.LevelInfo
	if e.Result == track.ResultNACK || e.Result == track.ResultTimeout {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	// The line is built on the stack and copied once into its string: a
	// push's line is the live log's only per-push garbage besides its facts.
	var buf [256]byte
	msg := string(appendPushLine(buf[:0], e, suppressed))
	if !l.detail {
		l.log.LogAttrs(ctx, level, msg, slog.Uint64("stream", p.StreamID))
		return
	}
	d := p.Diff
	// The facts are typed attributes, as slog would make of key-value
	// pairs, but without boxing each value in an interface first.
	n := 17
	if e.Result == track.ResultNACK {
		n += 6
	}
	facts := make([]slog.Attr, 0, n)
	facts = append(facts,
		slog.String("node", p.Node.ID), slog.String("type", p.Type), slog.String("type_url", p.TypeURL),
		slog.String("version", p.Version), slog.String("nonce", p.Nonce),
		slog.Int("resources", p.Resources), slog.Int("bytes", p.Bytes),
		slog.Int("added", d.Added), slog.Int("removed", d.Removed), slog.Int("changed", d.Changed), slog.Int("unchanged", d.Unchanged),
		slog.Bool("full_sync", p.FullSync), slog.Bool("initial", p.Initial), slog.Bool("redundant", p.Redundant),
		slog.String("result", string(e.Result)), slog.Float64("latency_ms", shared.Ms(e.Latency)),
	)
	if e.Result == track.ResultNACK {
		facts = append(facts, slog.Int64("error_code", int64(e.ErrorCode)), slog.String("error", e.Error),
			slog.Any("error_resources", e.ErrorNames), slog.Int("suppressed_before", suppressed))
		if x := origin.Of(e.Rejected); x != nil {
			facts = append(facts, slog.Any("istio_config", shared.ObjectPaths(x)), slog.String("source", x.Summary()))
		}
	}
	// The stream id stays in plain sight, to look the stream up in
	// /debug/streams; the facts are for machines only.
	l.log.LogAttrs(ctx, level, msg, slog.Uint64("stream", p.StreamID), slog.Attr{Key: export.DetailGroup, Value: slog.GroupValue(facts...)})
}

// fullPush writes the line of a full push, which every stream of a mesh
// gets at once: built like a push's line, without garbage but its string.
func (l *Log) fullPush(e track.FullPush) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	var buf [256]byte
	b := append(buf[:0], "full push v="...)
	b = append(b, e.Version...)
	b = append(b, " on stream "...)
	b = strconv.AppendUint(b, e.StreamID, 10)
	b = append(b, ": "...)
	b = append(b, shared.TypeLabel(e.TypeURL)...)
	b = append(b, " resent unasked ("...)
	b = strconv.AppendInt(b, int64(e.Count), 10)
	b = append(b, " on this stream)"...)
	if e.Node.ID != "" {
		b = append(b, " node="...)
		b = append(b, e.Node.ID...)
	}
	msg := string(b)
	if !l.detail {
		l.log.LogAttrs(ctx, slog.LevelInfo, msg)
		return
	}
	l.log.LogAttrs(ctx, slog.LevelInfo, msg, slog.Attr{Key: export.DetailGroup, Value: slog.GroupValue(
		slog.Uint64("stream", e.StreamID), slog.String("node", e.Node.ID), slog.String("version", e.Version),
		slog.Uint64("round", e.Round), slog.String("type_url", e.TypeURL), slog.Int("full_pushes", e.Count),
	)})
}

// appendPushLine appends the line of a push outcome to b, e.g.
// "CDS v=42 +2 -0 ~1 =117 1.2MB node=sidecar~… ACK 14ms".
func appendPushLine(b []byte, e track.PushEnded, suppressed int) []byte {
	p := e.Push
	d := p.Diff
	b = append(b, shared.TypeLabel(p.TypeURL)...)
	b = append(b, " v="...)
	b = append(b, p.Version...)
	b = append(b, " +"...)
	b = strconv.AppendInt(b, int64(d.Added), 10)
	b = append(b, " -"...)
	b = strconv.AppendInt(b, int64(d.Removed), 10)
	b = append(b, " ~"...)
	b = strconv.AppendInt(b, int64(d.Changed), 10)
	b = append(b, " ="...)
	b = strconv.AppendInt(b, int64(d.Unchanged), 10)
	b = append(b, ' ')
	b = shared.AppendSize(b, p.Bytes)
	if p.FullSync {
		if p.Initial {
			b = append(b, " full"...)
		} else {
			b = append(b, " full(repeated)"...)
		}
	}
	if p.Redundant {
		b = append(b, " redundant"...)
	}
	if p.Node.ID != "" {
		b = append(b, " node="...)
		b = append(b, p.Node.ID...)
	}
	switch e.Result {
	case track.ResultACK:
		b = append(b, " ACK "...)
		b = shared.AppendLatency(b, e.Latency)
	case track.ResultNACK:
		b = append(b, " NACK "...)
		b = shared.AppendLatency(b, e.Latency)
		b = append(b, ": "...)
		b = append(b, e.Error...)
		if s := origin.Of(e.Rejected).Summary(); s != "" {
			b = append(b, " — "...)
			b = append(b, s...)
		}
		if suppressed > 0 {
			b = append(b, " [+"...)
			b = strconv.AppendInt(b, int64(suppressed), 10)
			b = append(b, " identical NACKs since the last line]"...)
		}
	case track.ResultTimeout:
		b = append(b, " UNANSWERED after "...)
		b = append(b, e.Latency.Round(time.Second).String()...)
	default:
		b = append(b, ' ')
		b = append(b, strings.ToUpper(string(e.Result))...)
	}
	return b
}

// throttle decides whether a push outcome gets its line, and how many
// identical NACKs were left out before it. st is the push's stream's (nil
// for an event made outside a tracker: every line is written).
func (l *Log) throttle(st *logStream, e track.PushEnded) (suppressed int, write bool) {
	if st == nil {
		return 0, true
	}
	k := e.Push.TypeURL
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.repeats[k]
	if e.Result != track.ResultNACK {
		if r != nil && e.Result == track.ResultACK {
			delete(st.repeats, k)
		}
		return 0, true
	}
	if r != nil && r.version == e.Push.Version && r.message == e.Error && e.At.Sub(r.written) < l.repeatEvery {
		r.suppressed++
		return 0, false
	}
	if r == nil {
		r = &repeat{}
		if st.repeats == nil {
			st.repeats = map[string]*repeat{}
		}
		st.repeats[k] = r
	} else {
		suppressed = r.suppressed
	}
	*r = repeat{version: e.Push.Version, message: e.Error, written: e.At}
	return suppressed, true
}

// line logs msg with its facts, which are for machines only.
func (l *Log) line(level slog.Level, msg string, facts ...any) {
	if !l.detail {
		l.log.Log(context.Background(), level, msg)
		return
	}
	l.log.Log(context.Background(), level, msg, slog.Group(export.DetailGroup, facts...))
}

func shortMethod(m string) string {
	if i := strings.LastIndex(m, "/"); i >= 0 {
		return m[i+1:]
	}
	return m
}

func quoteIf(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("%q", s)
}

func codeName(c uint32) string { return codes.Code(c).String() }
