package track_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// wire plays messages against a tracker one after the other, a millisecond
// apart from at, and keeps every event.
type wire struct {
	t   *testing.T
	tr  *track.Tracker
	evs []track.Event
}

func (w *wire) play(stream uint64, at time.Duration, msgs ...proto.Message) {
	w.t.Helper()
	for i, m := range msgs {
		w.evs = append(w.evs, frame(stream, m)(w.t, w.tr, t0.Add(at+time.Duration(i)*ms))...)
	}
}

func (w *wire) do(a action, at time.Duration) { w.evs = append(w.evs, a(w.t, w.tr, t0.Add(at))...) }

// fullPushes describes the FullPush and detector events.
func (w *wire) fullPushes() []string {
	var out []string
	for _, e := range w.evs {
		switch e.(type) {
		case track.FullPush, track.DetectorStarted, track.DetectorEnded:
			out = append(out, describe(e))
		}
	}
	return out
}

// pushIDs are the push identities of the pushes sent, in order, as
// "type=id".
func (w *wire) pushIDs() []string {
	var out []string
	for _, e := range w.evs {
		if e, ok := e.(track.PushSent); ok {
			out = append(out, e.Push.Type+"="+strings.Replace(e.Push.PushID(), "2026-11-30T09:00:00Z/", "", 1))
		}
	}
	return out
}

// syncedSotW opens SotW stream 1 and syncs CDS, EDS, LDS and RDS at
// version 1, as Envoy and istiod do: each type's first response answers
// its request, so nothing of it is a full push.
func syncedSotW(t *testing.T, tr *track.Tracker) *wire {
	w := &wire{t: t, tr: tr}
	w.do(open(1, adsSotW), 0)
	w.play(1, 0,
		withNode(initial(cds), sidecar), push(cds, 1, cluster(reviews)), ack(cds, 1),
		initial(eds, reviews), push(eds, 1, endpoint(reviews, "10.0.0.1")), ack(eds, 1, reviews),
		initial(lds), push(lds, 1, listener("0.0.0.0_9080")), ack(lds, 1),
		initial(rds, "9080"), push(rds, 1, route("9080")), ack(rds, 1, "9080"),
	)
	return w
}

func TestFullPushes(t *testing.T) {
	leakcheck.Check(t)
	leakcheck.Check(t)
	t.Run("istiod's full push to a SotW client is one full push", func(t *testing.T) {
		w := syncedSotW(t, track.New(track.Config{}))
		// A new ServiceEntry: CDS and LDS whole, the new cluster's EDS,
		// RDS; the client asks for the new cluster's endpoints in between
		// (its request crosses the tap before istiod's EDS), and istiod
		// answers that request too, under the push's version.
		w.play(1, 10*time.Second,
			push(cds, 2, cluster(reviews), cluster(ratings)), ack(cds, 2),
			ack(eds, 1, reviews, ratings),
			push(eds, 2, endpoint(ratings, "10.0.0.2")), ack(eds, 2, reviews, ratings),
			push(eds, 2, endpoint(reviews, "10.0.0.1"), endpoint(ratings, "10.0.0.2")), ack(eds, 2, reviews, ratings),
			push(lds, 2, listener("0.0.0.0_9080")), ack(lds, 2),
			push(rds, 2, route("9080")), ack(rds, 2, "9080"),
		)
		if diff := cmp.Diff([]string{"fullpush 1 v=2 round=2 by=cds count=1"}, w.fullPushes()); diff != "" {
			t.Errorf("full pushes (-want +got):\n%s", diff)
		}
		if got := w.tr.Streams("")[0].FullPushes; got != 1 {
			t.Errorf("/debug/streams full_pushes = %d, want 1", got)
		}
		want := []string{"cds=1", "eds=1", "lds=1", "rds=1", "cds=2", "eds=2", "eds=2", "lds=2", "rds=2"}
		if diff := cmp.Diff(want, w.pushIDs()); diff != "" {
			t.Errorf("push ids (-want +got):\n%s", diff)
		}
	})

	t.Run("istiod's full push to a Delta client (CDS and LDS with what changed) is one full push", func(t *testing.T) {
		w := &wire{t: t, tr: track.New(track.Config{})}
		w.do(open(1, adsDelta), 0)
		w.play(1, 0,
			withDeltaNode(dinitial(cds), sidecar), dpush(cds, 1, nil, cluster(reviews)), dack(cds, 1),
			dinitial(lds), dpush(lds, 1, nil, listener("0.0.0.0_9080")), dack(lds, 1),
			dsub(eds, 1, []string{reviews}, nil), dpush(eds, 1, nil, endpoint(reviews, "10.0.0.1")), dack(eds, 1),
		)
		w.play(1, 4*time.Second,
			dpush(cds, 2, nil, cluster(ratings)), dack(cds, 2),
			dpush(lds, 2, nil, listener("0.0.0.0_9080")), dack(lds, 2),
			dsub(eds, 2, []string{ratings}, nil), dpush(eds, 2, nil, endpoint(ratings, "10.0.0.2")), dack(eds, 2),
		)
		if diff := cmp.Diff([]string{"fullpush 1 v=2 round=2 by=cds count=1"}, w.fullPushes()); diff != "" {
			t.Errorf("full pushes (-want +got):\n%s", diff)
		}
	})

	t.Run("endpoint churn at any rate: incremental EDS pushes are never full", func(t *testing.T) {
		w := syncedSotW(t, track.New(track.Config{}))
		for n := 2; n < 1000; n++ {
			w.play(1, time.Second+time.Duration(n)*5*ms, push(eds, n, endpoint(reviews, fmt.Sprintf("10.0.%d.%d", n/250, n%250))), ack(eds, n, reviews))
		}
		w.do(tick(), 10*time.Second)
		if got := w.fullPushes(); len(got) != 0 {
			t.Errorf("endpoint churn made full pushes: %v", got)
		}
	})

	t.Run("three config changes 4s apart raise the alarm, which ends a minute after the last but one", func(t *testing.T) {
		w := syncedSotW(t, track.New(track.Config{}))
		for i, n := range []int{2, 3, 4} {
			at := 10*time.Second + time.Duration(i)*4*time.Second
			w.play(1, at, push(cds, n, cluster(reviews)), ack(cds, n), push(lds, n, listener("0.0.0.0_9080")), ack(lds, n))
		}
		w.do(tick(), 73*time.Second+999*ms)
		w.do(tick(), 74*time.Second)
		key := `"node ` + sidecar + `"`
		want := []string{
			"fullpush 1 v=2 round=2 by=cds count=1",
			"fullpush 1 v=3 round=3 by=cds count=2",
			"start repeated_full_sync " + key + " count=2",
			"fullpush 1 v=4 round=4 by=cds count=3",
			// Pushes at 10s, 14s and 18s: two within the minute until 74s.
			"end repeated_full_sync " + key + " count=3 after 1m0s",
		}
		if diff := cmp.Diff(want, w.fullPushes()); diff != "" {
			t.Errorf("full pushes (-want +got):\n%s", diff)
		}
	})

	t.Run("a reconnect's initial sync is no full push", func(t *testing.T) {
		tr := track.New(track.Config{})
		w := syncedSotW(t, tr)
		w.do(closeStream(1, 14, ""), time.Second)
		w.do(open(2, adsSotW), 2*time.Second)
		w.play(2, 2*time.Second, withNode(initial(cds), sidecar), push(cds, 1, cluster(reviews)), ack(cds, 1),
			initial(lds), push(lds, 1, listener("0.0.0.0_9080")), ack(lds, 1))
		if got := w.fullPushes(); len(got) != 0 {
			t.Errorf("a reconnect made full pushes: %v", got)
		}
	})

	t.Run("a control plane re-sending the same version after NACKs is counted once", func(t *testing.T) {
		w := syncedSotW(t, track.New(track.Config{}))
		for i := range 5 {
			w.play(1, 10*time.Second+time.Duration(i)*100*ms, push(cds, 2, clusterV2(reviews)), nack(cds, 2, 1, "rejected"))
		}
		want := []string{
			"fullpush 1 v=2 round=2 by=cds count=1",
			`start nack_loop "stream 1 cds" count=3`,
			`start nack_storm "stream 1 cds" count=5`,
		}
		if diff := cmp.Diff(want, w.fullPushes()); diff != "" {
			t.Errorf("full pushes (-want +got):\n%s", diff)
		}
	})
}

// TestPushIDs: released istiod versions give an incremental (EDS) push the
// version of the last full push; the push id still tells every push round
// apart.
func TestPushIDs(t *testing.T) {
	leakcheck.Check(t)
	leakcheck.Check(t)
	w := syncedSotW(t, track.New(track.Config{}))
	w.play(1, 10*time.Second,
		push(cds, 5, cluster(reviews), cluster(ratings)), ack(cds, 5), ack(eds, 1, reviews, ratings),
		push(eds, 5, endpoint(reviews, "10.0.0.1"), endpoint(ratings, "10.0.0.2")), ack(eds, 5, reviews, ratings),
		push(lds, 5, listener("0.0.0.0_9080")), ack(lds, 5),
	)
	// Two endpoint changes, pushed as version 5 again.
	w.play(1, 10*time.Second+500*ms, push(eds, 5, endpoint(reviews, "10.0.0.9")), ack(eds, 5, reviews, ratings))
	w.play(1, 13*time.Second, push(eds, 5, endpoint(reviews, "10.0.0.8")), ack(eds, 5, reviews, ratings))
	// The first endpoint change again, later: the same content under the
	// same version is the same push, wherever it is seen.
	ids := w.pushIDs()[4:]
	if ids[0] != "cds=5" || ids[1] != "eds=5" || ids[2] != "lds=5" {
		t.Errorf("the full push's ids = %v, want its version", ids[:3])
	}
	inc := ids[3:]
	if len(inc) != 2 || inc[0] == inc[1] || !strings.HasPrefix(inc[0], "eds=5 eds:") || !strings.HasPrefix(inc[1], "eds=5 eds:") {
		t.Errorf("incremental push ids = %v, want two different ids, each the version, the type and the content", inc)
	}
	if diff := cmp.Diff([]string{"fullpush 1 v=5 round=2 by=cds count=1"}, w.fullPushes()); diff != "" {
		t.Errorf("full pushes (-want +got):\n%s", diff)
	}
	// Another proxy receiving the same incremental push gets the same id.
	other := &wire{t: t, tr: track.New(track.Config{})}
	other.do(open(7, adsSotW), 0)
	other.play(7, 0, withNode(initial(eds, reviews), sidecar), push(eds, 1, endpoint(reviews, "10.0.0.1")), ack(eds, 1, reviews))
	other.play(7, 10*time.Second, push(eds, 5, endpoint(reviews, "10.0.0.9")), ack(eds, 5, reviews))
	if got := other.pushIDs()[1]; got != inc[0] {
		t.Errorf("the same incremental push on another stream has id %q, want %q", got, inc[0])
	}
	if slices.Contains(ids, "") {
		t.Errorf("a push without an id: %v", ids)
	}
}

func withDeltaNode(r *discoveryv3.DeltaDiscoveryRequest, id string) *discoveryv3.DeltaDiscoveryRequest {
	r.Node = envoyNode(id)
	return r
}
