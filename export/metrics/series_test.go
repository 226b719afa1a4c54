package metrics_test

import (
	"testing"
	"time"

	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// A bucket of the ACK latency takes a new exemplar at most once a second:
// the first ACK in it, then the first a second later; another bucket and
// the node label's series keep their own, and every NACK takes its
// bucket's. Every answer is counted.
func TestLatencyExemplarsAreTakenOnceASecondABucket(t *testing.T) {
	leakcheck.Check(t)
	type answer struct {
		node    string
		after   time.Duration // from t0
		latency time.Duration
		result  track.PushResult
	}
	answers := []answer{
		{"a", 0, 3 * time.Millisecond, track.ResultACK},                                         // .005: a
		{"b", 100 * time.Millisecond, 4 * time.Millisecond, track.ResultACK},                    // .005: still a
		{"c", 100 * time.Millisecond, 20 * time.Millisecond, track.ResultACK},                   // .025: c
		{"d", 200 * time.Millisecond, 4 * time.Millisecond, track.ResultNACK},                   // nack .005: d
		{"f", 900 * time.Millisecond, 15 * time.Millisecond, track.ResultACK},                   // .025: still c
		{"g", 1100 * time.Millisecond, 4*time.Millisecond + time.Microsecond, track.ResultNACK}, // nack .005: g (every NACK)
		{"e", 1200 * time.Millisecond, 2 * time.Millisecond, track.ResultACK},                   // .005: e, a second after a
	}
	for _, bc := range []struct {
		name      string
		nodeLabel bool
		want      map[string]map[float64]string // result → bucket → node of its exemplar
	}{
		{"type", false, map[string]map[float64]string{"ack": {.005: "e", .025: "c"}, "nack": {.005: "g"}}},
		// With the node label every series is a node's: each answer its own.
		{"node", true, map[string]map[float64]string{"ack": {.005: "e", .025: "f"}, "nack": {.005: "g"}}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			m := metrics.New(metrics.Config{NodeLabel: bc.nodeLabel, TraceID: func(*track.Push) string { return "4bf92f3577b34da6a3ce929d0e0e4736" }})
			for _, a := range answers {
				p := cdsPush("v-" + a.node)
				p.Node.ID, p.SentAt = a.node, t0.Add(a.after-a.latency)
				for _, e := range eventtest.Tracked(track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: a.result, At: t0.Add(a.after), Latency: a.latency}) {
					m.OnEvent(e)
				}
			}
			families, err := m.Registry().Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]map[float64]string{}
			var count uint64
			for _, f := range families {
				if f.GetName() != "adstap_push_ack_seconds" {
					continue
				}
				for _, s := range f.GetMetric() {
					var result string
					for _, l := range s.GetLabel() {
						if l.GetName() == "result" {
							result = l.GetValue()
						}
					}
					count += s.GetHistogram().GetSampleCount()
					for _, b := range s.GetHistogram().GetBucket() {
						for _, l := range b.GetExemplar().GetLabel() {
							if l.GetName() == "node_id" {
								if got[result] == nil {
									got[result] = map[float64]string{}
								}
								// With the node label, the latest node's series wins the map.
								if n, ok := got[result][b.GetUpperBound()]; !ok || n < l.GetValue() {
									got[result][b.GetUpperBound()] = l.GetValue()
								}
							}
						}
					}
				}
			}
			if count != uint64(len(answers)) {
				t.Errorf("%d answers counted, want %d", count, len(answers))
			}
			for result, buckets := range bc.want {
				for le, node := range buckets {
					if got[result][le] != node {
						t.Errorf("exemplar of %s bucket le=%v: node %q, want %q (all: %v)", result, le, got[result][le], node, got)
					}
				}
			}
		})
	}
}
