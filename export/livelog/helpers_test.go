package livelog_test

import (
	"reflect"

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
	out := make([]track.Event, len(events))
	for i, e := range events {
		v := reflect.New(reflect.TypeOf(e)).Elem()
		v.Set(reflect.ValueOf(e))
		// The event's Ref and stream id, at its top or in its Push.
		holder := v
		if p := v.FieldByName("Push"); p.IsValid() {
			holder = p
		}
		ref, id := holder.FieldByName("Ref"), holder.FieldByName("StreamID")
		if s := v.FieldByName("Stream"); s.IsValid() {
			id = s.FieldByName("ID")
		}
		if ref.IsValid() && id.IsValid() && id.Uint() != 0 {
			n := id.Uint()
			if o, ok := e.(track.StreamOpened); ok {
				refs[n] = track.NewStreamRef(o.Stream)
			} else if refs[n] == nil {
				refs[n] = track.NewStreamRef(track.StreamMeta{ID: n})
			}
			ref.Set(reflect.ValueOf(refs[n]))
			switch e := e.(type) {
			case track.PushSent:
				_, seen := pushed[n]
				holder.FieldByName("First").SetBool(!seen)
				pushed[n] = e.Push.TypeURL
			case track.DecodeError:
				v.FieldByName("TypeURL").SetString(pushed[n])
			}
		}
		out[i] = v.Interface().(track.Event)
	}
	return out
}
