package pipeline

import (
	"sync"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/feed"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// Observer decodes the frames the relay hands over, feeds them to a
// track.Tracker and passes the events on to its sinks. It is the tap.Observer
// that turns bytes into protocol knowledge: the one place the relay and the
// tracker meet.
type Observer struct {
	tracker *track.Tracker
	sinks   []track.Sink
	// tickers are told the clock's time after the tracker: outputs with
	// time-based rules of their own (references.References).
	tickers []func(time.Time)
	// responses are reused across decodes, so a steady stream of pushes does
	// not allocate per resource; events, the buffers a frame's events are
	// gathered in (*[]track.Event), emptied once the sinks had them.
	responses, events sync.Pool
}

var _ tap.Observer = (*Observer)(nil)

// NewObserver returns an Observer feeding t and telling sinks.
func NewObserver(t *track.Tracker, sinks ...track.Sink) *Observer {
	o := &Observer{tracker: t, sinks: sinks}
	o.responses.New = func() any { return new(codec.Response) }
	return o
}

// OnStreamOpen starts tracking a stream.
func (o *Observer) OnStreamOpen(s tap.StreamInfo) {
	o.emit(o.tracker.OpenStream(metaOf(s)))
}

// OnFrame decodes one frame's envelope and tracks it (feed.Track).
// Undecodable frames were relayed all the same; they are reported as
// DecodeError events.
func (o *Observer) OnFrame(s tap.StreamInfo, f tap.Frame) {
	proto := s.Protocol
	if proto == codec.Opaque {
		return
	}
	if f.Skipped > 0 {
		o.emit(o.tracker.Gap(s.ID, f.Time, f.Skipped))
	}
	var resp *codec.Response
	if f.Direction == tap.Response {
		resp = o.responses.Get().(*codec.Response)
		defer func() {
			// Its views point into the push's bytes: pooled with them, it
			// would keep a push as large as the last one from the collector
			// for two more collections.
			resp.Reset()
			o.responses.Put(resp)
		}()
	}
	buf, _ := o.events.Get().(*[]track.Event)
	if buf == nil {
		buf = new([]track.Event)
	}
	evs, _ := feed.Track(o.tracker, resp, feed.Frame{Stream: s.ID, At: f.Time, Response: f.Direction == tap.Response,
		Delta: proto == codec.Delta, Data: f.Data, Size: f.Size, Events: (*buf)[:0]})
	o.emit(evs)
	// The sinks had every event by value: the buffer keeps none of them,
	// which would hold a push's state from the collector.
	clear(evs)
	if cap(evs) <= maxPooledEvents {
		*buf = evs[:0]
		o.events.Put(buf)
	}
}

// maxPooledEvents is the most events a pooled buffer holds: a stream's
// close or a full sync can make many, and a buffer kept for them would
// stay that large.
const maxPooledEvents = 64

// OnStreamClose ends tracking of a stream.
func (o *Observer) OnStreamClose(s tap.StreamInfo, e tap.StreamEnd) {
	if e.Skipped > 0 {
		o.emit(o.tracker.Gap(s.ID, e.Time, e.Skipped))
	}
	o.emit(o.tracker.CloseStream(s.ID, e.Time, uint32(e.Code), e.Message))
}

// OnUpstreamConnect passes the phases of an upstream connection on to the sinks.
func (o *Observer) OnUpstreamConnect(c codec.UpstreamConnect) {
	o.emit([]track.Event{track.UpstreamConnected{UpstreamConnect: c}})
}

// Tick lets time-based rules run (push timeouts, the end of storms); call it
// about once a second.
func (o *Observer) Tick(now time.Time) {
	o.emit(o.tracker.Tick(now))
	for _, tick := range o.tickers {
		tick(now)
	}
}

func (o *Observer) emit(events []track.Event) {
	for _, e := range events {
		for _, s := range o.sinks {
			s.OnEvent(e)
		}
	}
}

func metaOf(s tap.StreamInfo) track.StreamMeta {
	m := track.StreamMeta{ID: s.ID, ConnID: s.ConnID, Method: s.Method, Protocol: s.Protocol, OpenedAt: s.OpenedAt, Connect: s.Connect}
	if s.Peer != nil {
		m.Peer = s.Peer.String()
	}
	return m
}

// startClock calls Tick every interval until stop is called, so push
// timeouts and the end of storms are noticed even when no frame arrives. The
// Tracker itself keeps no clock; this adapter gives it one.
func (o *Observer) startClock(every time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				o.Tick(now)
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
