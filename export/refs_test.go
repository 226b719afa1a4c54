package export_test

import (
	"github.com/adstap/adstap/track"
)

// stream3 is the stream of cdsPush, for events fed one by one.
var stream3 = track.NewStreamRef(track.StreamMeta{ID: 3, OpenedAt: t0})

// tracked fills in what a tracker hands with its events and a hand-written
// list leaves out: each stream's StreamRef (made at its StreamOpened, or at
// its first event), the stream's first push, and the type of its latest
// push for a DecodeError.
func tracked(events ...track.Event) []track.Event {
	refs := map[uint64]*track.StreamRef{}
	pushed := map[uint64]string{}
	ref := func(id uint64) *track.StreamRef {
		if id == 0 {
			return nil
		}
		if refs[id] == nil {
			refs[id] = track.NewStreamRef(track.StreamMeta{ID: id})
		}
		return refs[id]
	}
	out := make([]track.Event, len(events))
	for i, e := range events {
		switch e := e.(type) {
		case track.StreamOpened:
			e.Ref = track.NewStreamRef(e.Stream)
			refs[e.Stream.ID] = e.Ref
			out[i] = e
		case track.StreamClosed:
			e.Ref = ref(e.Stream.ID)
			out[i] = e
		case track.PushSent:
			e.Push.Ref = ref(e.Push.StreamID)
			_, seen := pushed[e.Push.StreamID]
			e.Push.First = !seen
			pushed[e.Push.StreamID] = e.Push.TypeURL
			out[i] = e
		case track.PushEnded:
			e.Push.Ref = ref(e.Push.StreamID)
			out[i] = e
		case track.LateAnswer:
			e.Push.Ref = ref(e.Push.StreamID)
			out[i] = e
		case track.RequestSeen:
			e.Ref = ref(e.StreamID)
			out[i] = e
		case track.FullPush:
			e.Ref = ref(e.StreamID)
			out[i] = e
		case track.FullSyncComplete:
			e.Ref = ref(e.StreamID)
			out[i] = e
		case track.DetectorStarted:
			e.Ref = ref(e.StreamID)
			out[i] = e
		case track.DetectorEnded:
			e.Ref = ref(e.StreamID)
			out[i] = e
		case track.DecodeError:
			e.Ref, e.TypeURL = ref(e.StreamID), pushed[e.StreamID]
			out[i] = e
		case track.ObservationGap:
			e.Ref = ref(e.StreamID)
			out[i] = e
		default:
			out[i] = e
		}
	}
	return out
}
