package livelog_test

import (
	"github.com/adstap/adstap/track"
)

// stream3 is the stream of cdsPush, for events fed one by one.
var stream3 = track.NewStreamRef(track.StreamMeta{ID: 3, OpenedAt: t0})
