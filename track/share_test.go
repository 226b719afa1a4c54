package track_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/origin"
	"github.com/adstap/adstap/track"
)

// sendOn is keepHarness.send on stream id.
func (h *keepHarness) sendOn(id uint64, m proto.Message) []track.Event {
	h.t.Helper()
	return h.sendStream(id, m)
}

// TestFanOutKeepsOnce: the same push sent to many streams, as a control
// plane's full push goes to every proxy, is kept once, whole or compact,
// with the views of its resources the outputs are handed, and
// --nack-keep-bytes counts it once: a bound that holds two copies and a
// little per stream keeps every push, where a copy per stream would skip
// most. A NACK on any stream still names what it rejected; the other
// streams' buffers go back at once, and once every stream has answered
// nothing is kept.
func TestFanOutKeepsOnce(t *testing.T) {
	leakcheck.Check(t)
	const streams = 100
	v1, v2 := push(cds, 1, shopClusters(false)...), push(cds, 2, shopClusters(false, 3)...)
	size := int64(proto.Size(v1))
	var taker *track.Taker
	h := newKeepHarness(t, track.Config{KeepBytes: 2*size + streams*1024}, adsSotW, func(tr *track.Tracker) { taker = tr.TakeAccepted(track.Takes{}) })
	for id := uint64(2); id <= streams; id++ {
		h.tr.OpenStream(track.StreamMeta{ID: id, Method: adsSotW, OpenedAt: t0})
	}
	var accepted []*track.Lease
	answer := func(evs []track.Event) {
		for _, e := range evs {
			if e, ok := e.(track.PushEnded); ok && e.Accepted != nil {
				accepted = append(accepted, taker.Lease(e.Accepted))
			}
		}
	}
	for id := uint64(1); id <= streams; id++ {
		h.sendOn(id, initial(cds))
		h.sendOn(id, v1)
	}
	if got := h.tr.Kept(); got.Skipped != 0 || got.Bytes > 2*size {
		t.Fatalf("after the first push to %d streams, Kept() = %+v, want none skipped and the push and its views held once (%d bytes)", streams, got, size)
	}
	h.wantReturned(streams - 1) // the first stream's buffer is the one kept
	for id := uint64(1); id <= streams; id++ {
		answer(h.sendOn(id, ack(cds, 1)))
		h.sendOn(id, v2)
	}
	for _, l := range accepted {
		a := l.Accepted()
		if len(a.Resources) != 8 || a.Resources[7].Body == nil {
			t.Fatalf("an Accepted of the shared push holds %d resources, want the 8 with their bodies", len(a.Resources))
		}
		l.Release()
	}
	accepted = accepted[:0]
	if got := h.tr.Kept(); got.Skipped != 0 {
		t.Fatalf("after the second push, Kept() = %+v, want none skipped", got)
	}
	r := rejectedBy(t, h.sendOn(streams/2, nack(cds, 2, 1, "resource "+shopCluster(3)+": bad")))
	res, err := origin.Of(r).Resources()
	if err != nil || len(res) != 1 || !strings.Contains(res[0].Name, shopCluster(3)) {
		t.Errorf("the NACK on stream %d rejected %+v (%v), want %s", streams/2, res, err, shopCluster(3))
	}
	for id := uint64(1); id <= streams; id++ {
		if id != streams/2 {
			answer(h.sendOn(id, ack(cds, 2)))
		}
	}
	for _, l := range accepted {
		l.Release()
	}
	for id := uint64(1); id <= streams; id++ {
		h.tr.CloseStream(id, h.now(), 0, "")
	}
	h.wantLetGo(2 * streams)
}
