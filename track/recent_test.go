package track_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// outcome is what a recent push says: type, version number, result,
// latency and the NACK's message.
type outcome struct {
	Type    string
	Version string
	Result  track.PushResult
	Latency time.Duration // -1 while the push waits
	Error   string
}

func outcomes(t *testing.T, tr *track.Tracker, id uint64) []outcome {
	t.Helper()
	recs, ok := tr.RecentPushes(id)
	if !ok {
		t.Fatalf("stream %d is not tracked", id)
	}
	var out []outcome
	for _, r := range recs {
		o := outcome{Type: r.Type, Version: short(r.Version), Result: r.Result, Latency: -1, Error: r.Error}
		if r.LatencySeconds != nil {
			o.Latency = time.Duration(*r.LatencySeconds * float64(time.Second)).Round(time.Millisecond)
		}
		out = append(out, o)
	}
	return out
}

// playForState runs steps for their effect on the tracker's state, whatever events
// they give (the other tests check those).
func playForState(t *testing.T, tr *track.Tracker, steps []step) {
	t.Helper()
	for _, st := range steps {
		st.do(t, tr, t0.Add(st.at))
	}
}

func TestRecentPushesKeepEachOutcome(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{PushTimeout: 30 * time.Second})
	const rejected = "Error adding/updating cluster(s) " + reviews + ": unknown lb_policy"
	playForState(t, tr, []step{
		{do: open(1, adsSotW)},
		{do: frame(1, withNode(initial(cds), sidecar))},
		{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews)))},
		{at: 15 * ms, do: frame(1, ack(cds, 1))},
		{at: 20 * ms, do: frame(1, push(cds, 2, clusterV2(reviews)))},
		{at: 45 * ms, do: frame(1, nack(cds, 2, 1, rejected))},
		{at: 50 * ms, do: frame(1, initial(eds, reviews))},
		{at: 60 * ms, do: frame(1, push(eds, 3, endpoint(reviews, "10.0.0.1")))},
		{at: 70 * ms, do: frame(1, push(eds, 4, endpoint(reviews, "10.0.0.2")))},
		{at: 71 * ms, do: frame(1, push(cds, 5, cluster(reviews)))},
	})
	want := []outcome{
		{"cds", "1", track.ResultACK, 5 * ms, ""},
		{"cds", "2", track.ResultNACK, 25 * ms, rejected},
		{"eds", "3", track.ResultSuperseded, 10 * ms, ""},
		{"eds", "4", "", -1, ""},
		{"cds", "5", "", -1, ""},
	}
	if diff := cmp.Diff(want, outcomes(t, tr, 1)); diff != "" {
		t.Fatalf("recent pushes (-want +got):\n%s", diff)
	}
	// The waiting ones end by timeout; a late ACK then gives the real answer.
	tr.Tick(t0.Add(31 * time.Second))
	frame(1, ack(eds, 4, reviews))(t, tr, t0.Add(32*time.Second))
	want[3].Result, want[3].Latency = track.ResultACK, 32*time.Second-70*ms
	want[4].Result, want[4].Latency = track.ResultTimeout, 31*time.Second-71*ms
	if diff := cmp.Diff(want, outcomes(t, tr, 1)); diff != "" {
		t.Fatalf("after a timeout and a late ACK (-want +got):\n%s", diff)
	}
	if _, ok := tr.RecentPushes(2); ok {
		t.Error("RecentPushes of an unknown stream reports it tracked")
	}
}

func TestRecentPushesAreBounded(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	steps := []step{{do: open(1, adsSotW)}, {do: frame(1, withNode(initial(cds), sidecar))}}
	const pushes = track.RecentPushes + 5
	for n := 1; n <= pushes; n++ {
		at := time.Duration(n) * 10 * ms
		steps = append(steps, step{at: at, do: frame(1, push(cds, n, cluster(reviews)))}, step{at: at + ms, do: frame(1, ack(cds, n))})
	}
	playForState(t, tr, steps)
	got := outcomes(t, tr, 1)
	if len(got) != track.RecentPushes {
		t.Fatalf("%d recent pushes kept, want %d", len(got), track.RecentPushes)
	}
	if got[0].Version != "6" || got[len(got)-1].Version != "37" {
		t.Errorf("kept versions %s..%s, want 6..37 (the latest)", got[0].Version, got[len(got)-1].Version)
	}
	for _, o := range got {
		if o.Result != track.ResultACK || o.Latency != ms {
			t.Errorf("push %s: %s after %v, want ack after 1ms", o.Version, o.Result, o.Latency)
		}
	}
}

func TestStreamsShowTheControlPlaneAndIstioVersion(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	req := withNode(initial(cds), sidecar)
	meta, err := structpb.NewStruct(map[string]any{"ISTIO_VERSION": "1.28.1", "NAMESPACE": "default"})
	if err != nil {
		t.Fatal(err)
	}
	req.Node.Metadata = meta
	const istiod = `{"Component":"istiod","ID":"istiod-5d7c9d8d9b-x2x4k","Info":{"version":"1.28.1"}}`
	p := push(cds, 1, cluster(reviews))
	p.ControlPlane = &corev3.ControlPlane{Identifier: istiod}
	playForState(t, tr, []step{
		{do: open(1, adsSotW)},
		{do: frame(1, req)},
		{at: 10 * ms, do: frame(1, p)},
		{at: 20 * ms, do: frame(1, push(cds, 2, cluster(reviews)))}, // without one: the last known stays
	})
	s := tr.Streams("")[0]
	if s.ControlPlane != istiod || s.IstioVersion != "1.28.1" {
		t.Errorf("control plane %q, Istio version %q; want %q and 1.28.1", s.ControlPlane, s.IstioVersion, istiod)
	}
}
