package pipeline

import (
	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/recorder"
	"github.com/adstap/adstap/tap"
)

// captureObserver hands what the relay saw to recorder.Recorder as records:
// headers as they crossed, and each message by a reference of its own to
// the relay's buffers, which the capture lets go once it has written them.
type captureObserver struct{ c *recorder.Recorder }

var _ tap.Observer = captureObserver{}

func (o captureObserver) OnStreamOpen(s tap.StreamInfo) {
	r := capture.Record{Time: s.OpenedAt, Kind: capture.KindOpen, Stream: s.ID, Conn: s.ConnID, Method: s.Method,
		Protocol: string(s.Protocol), Headers: s.Header}
	if s.Peer != nil {
		r.Peer = s.Peer.String()
	}
	o.c.Record(r)
}

func (o captureObserver) OnFrame(s tap.StreamInfo, f tap.Frame) {
	if f.Skipped > 0 {
		o.c.Record(capture.Record{Time: f.Time, Kind: capture.KindGap, Stream: s.ID, Skipped: f.Skipped})
	}
	f.Data.Ref()
	o.c.Frame(capture.Record{Time: f.Time, Kind: capture.KindFrame, Stream: s.ID, Direction: f.Direction.String(), Size: f.Size}, f.Data)
}

func (o captureObserver) OnStreamClose(s tap.StreamInfo, e tap.StreamEnd) {
	if e.Skipped > 0 {
		o.c.Record(capture.Record{Time: e.Time, Kind: capture.KindGap, Stream: s.ID, Skipped: e.Skipped})
	}
	o.c.Record(capture.Record{Time: e.Time, Kind: capture.KindClose, Stream: s.ID, Code: e.Code.String(), StatusMessage: e.Message})
}

func (captureObserver) OnUpstreamConnect(codec.UpstreamConnect) {}
