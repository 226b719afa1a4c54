package metrics_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const node = "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local"

func cdsPush(version string) track.Push {
	return track.Push{
		StreamID: 3, Ref: stream3, Node: track.Node{ID: node}, TypeURL: codec.TypeCluster, Type: "cds",
		Version: version, Nonce: version + "abc", Resources: 120, Bytes: 1258291,
		Diff:   track.Diff{Added: 2, Changed: 1, Unchanged: 117},
		SentAt: t0,
	}
}

// stream3 is the stream of cdsPush, for events fed one by one.
var stream3 = track.NewStreamRef(track.StreamMeta{ID: 3, OpenedAt: t0})
