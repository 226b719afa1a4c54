package track_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
)

func TestNACKStorm(t *testing.T) {
	leakcheck.Check(t)
	// Each push carries different content, so no loop; no node, so no
	// full-sync alarm: only the storm speaks.
	var steps []step
	steps = append(steps,
		step{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
		step{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
	)
	for k := 1; k <= 6; k++ {
		name := fmt.Sprintf("outbound|9080||svc-%d.default.svc.cluster.local", k)
		added := "+1 -0 ~0 =0 " + plus("+", name) + " full"
		if k == 1 {
			added += " initial"
		}
		steps = append(steps,
			step{at: time.Duration(2*k-2) * time.Second, do: frame(1, push(cds, k, cluster(name))), want: []string{
				fmt.Sprintf("push 1 cds v=%d res=1 %s", k, added),
			}},
		)
		want := []string{"req 1 cds nack", fmt.Sprintf(`ended 1 cds v=%d nack 1s code=3 "bad" names=[]`, k)}
		if k == 5 {
			want = append(want, `start nack_storm "stream 1 cds" count=5`)
		}
		steps = append(steps, step{at: time.Duration(2*k-1) * time.Second, do: frame(1, nack(cds, k, 0, "bad")), want: want})
		if k > 1 {
			// A push after a NACK of other content replaces what
			// the client rejected: the next diff is against nothing.
			steps[len(steps)-2].want[0] = fmt.Sprintf("push 1 cds v=%d res=1 %s", k, added)
		}
	}
	steps = append(steps,
		// NACKs at 3, 5, 7, 9, 11s: five within 30s until 33s.
		step{at: 32 * time.Second, do: tick(), check: func(t *testing.T, tr *track.Tracker) {
			got := tr.Detectors()
			want := []track.DetectorState{
				{Detector: track.DetectorNACKStorm, Key: "stream 1 cds", TypeURL: cds, StreamID: 1, Since: t0.Add(9 * time.Second), Count: 6, Active: true},
				{Detector: track.DetectorNACKStorm, Since: t0.Add(9 * time.Second), Count: 1},
				{Detector: track.DetectorNACKLoop},
				{Detector: track.DetectorRepeatedFullSync},
				{Detector: track.DetectorReconnectHerd},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Detectors (-want +got):\n%s", diff)
			}
		}},
		step{at: 33 * time.Second, do: tick(), want: []string{`end nack_storm "stream 1 cds" count=6 after 24s`}},
		step{at: 34 * time.Second, do: tick()},
	)
	run(t, track.New(track.Config{}), steps)
}

func TestNACKStormEndsWithItsStream(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{NACKStormThreshold: 2})
	run(t, tr, []step{
		{do: open(1, adsDelta), want: []string{"open 1 delta"}},
		{do: frame(1, dinitial(eds, reviews)), want: []string{"req 1 eds initial"}},
		{do: frame(1, dpush(eds, 1, nil, endpoint(reviews, "10.0.0.1"))), want: []string{
			"push 1 eds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
		}},
		{do: frame(1, dnack(eds, 1, "x")), want: []string{"req 1 eds nack", `ended 1 eds v=1 nack 0s code=3 "x" names=[]`}},
		{do: frame(1, dpush(eds, 2, nil, endpoint(reviews, "10.0.0.2"))), want: []string{
			"push 1 eds v=2 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full",
		}},
		{do: frame(1, dnack(eds, 2, "x")), want: []string{
			"req 1 eds nack", `ended 1 eds v=2 nack 0s code=3 "x" names=[]`, `start nack_storm "stream 1 eds" count=2`,
		}},
		{at: time.Second, do: closeStream(1, 0, ""), want: []string{
			`end nack_storm "stream 1 eds" count=2 after 1s`, `close 1 code=0 "" node=""`,
		}},
	})
	if got := tr.Detectors(); len(got) != 4 || got[0].Active {
		t.Errorf("Detectors after close = %+v, want only the summary rows", got)
	}
}

// go-control-plane's snapshot cache re-sends a rejected snapshot at once
// under a new version, thousands of times a second: the loop must show, and
// following it must cost the same at the thousandth push as at the first.
func TestNACKLoop(t *testing.T) {
	leakcheck.Check(t)
	const pushes = 1000
	good := []proto.Message{cluster(reviews), cluster(ratings)}
	var bad []proto.Message
	for i := range 50 {
		bad = append(bad, cluster(fmt.Sprintf("outbound|9080||svc-%02d.default.svc.cluster.local", i)))
	}
	bad = append(bad, clusterV2(ratings))
	message := "Error adding/updating cluster(s) " + ratings + ": LEAST_REQUEST is not allowed here"

	// Decode every frame up front, so that what is measured is the tracker.
	type cycle struct {
		resp *codec.Response
		size int
		nack *codec.Request
	}
	cycles := make([]cycle, pushes)
	for i := range cycles {
		n := i + 2
		b, err := proto.Marshal(push(cds, n, bad...))
		if err != nil {
			t.Fatal(err)
		}
		resp := new(codec.Response)
		if err := resp.Decode(b, false); err != nil {
			t.Fatal(err)
		}
		rb, err := proto.Marshal(nack(cds, n, 1, message))
		if err != nil {
			t.Fatal(err)
		}
		req, err := codec.DecodeRequest(rb, false)
		if err != nil {
			t.Fatal(err)
		}
		cycles[i] = cycle{resp: resp, size: len(b), nack: req}
	}

	tr := track.New(track.Config{})
	var detectorEvents []string
	collect := func(evs []track.Event) {
		for _, e := range evs {
			switch e.(type) {
			case track.DetectorStarted, track.DetectorEnded:
				detectorEvents = append(detectorEvents, describe(e))
			}
		}
	}
	collect(tr.OpenStream(track.StreamMeta{ID: 1, Method: adsSotW, OpenedAt: t0}))
	collect(frame(1, withNode(initial(cds), sidecar))(t, tr, t0))
	collect(frame(1, push(cds, 1, good...))(t, tr, t0))
	collect(frame(1, ack(cds, 1))(t, tr, t0))

	at := t0.Add(time.Second)
	var last track.PushEnded
	playOne := func(i int) {
		at = at.Add(time.Millisecond)
		collect(tr.Response(1, at, cycles[i].resp, cycles[i].size))
		at = at.Add(time.Millisecond)
		evs := tr.Request(1, at, cycles[i].nack, 100)
		collect(evs)
		for _, e := range evs {
			if e, ok := e.(track.PushEnded); ok {
				last = e
			}
		}
	}
	play := func(from, to int) {
		for i := from; i < to; i++ {
			playOne(i)
		}
	}
	// The tracker's own allocations per cycle, measured by
	// testing.AllocsPerRun on the cycle itself (one processor while it
	// counts), not by the whole process's counters, which every other
	// goroutine of a busy test binary adds to. It makes runs+1 cycles.
	measure := func(from, to int) float64 {
		i := from
		perCycle := testing.AllocsPerRun(to-from-1, func() {
			playOne(i)
			i++
		})
		if i != to {
			t.Fatalf("measured cycles %d to %d, want %d to %d", from, i, from, to)
		}
		return perCycle
	}
	play(0, 100)
	perEarly := measure(100, 200)
	play(200, 900)
	perLate := measure(900, 1000)

	// A second too late for a storm window to empty, but not for the
	// control plane to give up: an ACK of good content ends the loop.
	collect(frame(1, push(cds, pushes+2, good...))(t, tr, at.Add(time.Millisecond)))
	collect(frame(1, ack(cds, pushes+2))(t, tr, at.Add(2*time.Millisecond)))

	// The storm is about the NACK rate: it lasts until its window drains.
	collect(tr.Tick(t0.Add(32 * time.Second)))
	collect(tr.Tick(t0.Add(33 * time.Second)))
	collect(tr.Tick(t0.Add(64 * time.Second)))

	wantEvents := []string{
		// Each resend goes out under a new version, unasked: a full push.
		// The second raises the alarm, which counts them all.
		`start repeated_full_sync "node ` + sidecar + `" count=2`,
		`start nack_loop "stream 1 cds" count=3`, // third NACK, at 1.006s
		`start nack_storm "stream 1 cds" count=5`,
		// The good content went out at 3.001s.
		`end nack_loop "stream 1 cds" count=1000 after 1.995s`,
		// The last five NACKs were at 2.992s to 3s, the fifth at 1.01s.
		`end nack_storm "stream 1 cds" count=1000 after 31.99s`,
		// 1001 full pushes; the last two, at 2.998s and 3.001s, leave
		// the window at 63.001s, and the tick at 64s sees it.
		`end repeated_full_sync "node ` + sidecar + `" count=1001 after 1m2.997s`,
	}
	if diff := cmp.Diff(wantEvents, detectorEvents); diff != "" {
		t.Errorf("detector events (-want +got):\n%s", diff)
	}
	if last.Result != track.ResultNACK || last.Error != message || fmt.Sprint(last.ErrorNames) != "["+ratings+"]" ||
		last.Push.Diff.Added != 50 || last.Push.Diff.Changed != 1 || last.Push.Diff.Unchanged != 0 || last.Push.Diff.Removed != 1 {
		t.Errorf("last NACK = %+v, want the rejected content diffed against the good one", last)
	}
	wantType(1, cds, track.TypeState{
		State: "SYNCED", LastSentVersion: ver(pushes + 2), LastSentNonce: nonce(pushes + 2),
		LastAckedVersion: ver(pushes + 2), LastAckedNonce: nonce(pushes + 2),
		Pushes: pushes + 2, ACKs: 2, NACKs: pushes, RedundantPushes: 1, FullSyncs: pushes + 2,
		Subscribed: []string{"*"}, Resources: 2,
	})(t, tr)

	t.Logf("allocations per push+NACK: %.2f (pushes 100-200), %.2f (pushes 900-1000)", perEarly, perLate)
	if perLate > perEarly+0.5 {
		t.Errorf("allocations per push+NACK grew from %.2f to %.2f", perEarly, perLate)
	}
	// The events themselves are the only allocations left: two slices and
	// three boxed events per cycle.
	limit := 8.0
	if raceEnabled {
		limit++ // the scratch space's pool drops some of what it holds
	}
	if perLate > limit {
		t.Errorf("allocations per push+NACK = %.2f, want at most %v", perLate, limit)
	}
}

func TestReconnectHerd(t *testing.T) {
	leakcheck.Check(t)
	var steps []step
	for id := uint64(1); id <= 101; id++ {
		at := time.Duration(id-1) * 5 * ms
		want := []string{fmt.Sprintf("open %d sotw", id)}
		if id == 100 {
			want = append(want, `start reconnect_herd "tap" count=100`)
		}
		steps = append(steps, step{at: at, do: open(id, adsSotW), want: want})
	}
	steps = append(steps,
		// The last 100 opens were at 5ms to 500ms.
		step{at: 1004 * ms, do: tick()},
		step{at: 1005 * ms, do: tick(), want: []string{`end reconnect_herd "tap" count=101 after 510ms`}},
		step{at: 1006 * ms, do: tick()},
		step{at: 3 * time.Second, do: open(200, adsSotW), want: []string{"open 200 sotw"}, check: func(t *testing.T, tr *track.Tracker) {
			rows := tr.Detectors()
			want := track.DetectorState{Detector: track.DetectorReconnectHerd, Since: t0.Add(495 * ms), Count: 1}
			if diff := cmp.Diff(want, rows[len(rows)-1]); diff != "" {
				t.Errorf("herd summary (-want +got):\n%s", diff)
			}
		}},
	)
	run(t, track.New(track.Config{}), steps)
}

func TestRepeatedFullSync(t *testing.T) {
	leakcheck.Check(t)
	pushCDS := func(id uint64, n int, initial bool) string {
		s := fmt.Sprintf("push %d cds v=%d res=1 ", id, n)
		if initial {
			return s + "+1 -0 ~0 =0 " + plus("+", reviews) + " full initial"
		}
		return s + "+0 -0 ~0 =1 full redundant"
	}
	t.Run("istiod's reconnects are not repeated full syncs", func(t *testing.T) {
		// A node reconnecting every few seconds (far worse than istiod's
		// 30 minutes) gets an initial full sync on each new stream.
		var steps []step
		for id := uint64(1); id <= 5; id++ {
			base := time.Duration(id-1) * 5 * time.Second
			steps = append(steps,
				step{at: base, do: open(id, adsSotW), want: []string{fmt.Sprintf("open %d sotw", id)}},
				step{at: base, do: frame(id, withNode(initial(cds), sidecar)), want: []string{fmt.Sprintf("req %d cds initial", id)}},
				step{at: base + 10*ms, do: frame(id, push(cds, 1, cluster(reviews))), want: []string{pushCDS(id, 1, true)}},
				step{at: base + 20*ms, do: frame(id, ack(cds, 1)), want: []string{fmt.Sprintf("req %d cds ack", id), fmt.Sprintf("ended %d cds v=1 ack 10ms", id)}},
				step{at: base + 4*time.Second, do: closeStream(id, 14, "closing"), want: []string{
					fmt.Sprintf("fullsync %d 20ms at=%v [cds]", id, base+20*ms),
					fmt.Sprintf(`close %d code=14 "closing" node="%s"`, id, sidecar),
				}},
			)
		}
		steps = append(steps, step{at: 30 * time.Second, do: tick(), check: func(t *testing.T, tr *track.Tracker) {
			for _, d := range tr.Detectors() {
				if d.Count != 0 {
					t.Errorf("detector %+v counted something", d)
				}
			}
		}})
		run(t, track.New(track.Config{}), steps)
	})
	t.Run("a node got configuration resent unasked more than once a minute", func(t *testing.T) {
		key := `"node ` + sidecar + `"`
		pushLDS := func(n int, initial bool) string {
			s := fmt.Sprintf("push 1 lds v=%d res=1 ", n)
			if initial {
				return s + "+1 -0 ~0 =0 +[virtualInbound] full initial"
			}
			return s + "+0 -0 ~0 =1 full redundant"
		}
		run(t, track.New(track.Config{}), []step{
			{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
			{do: frame(1, withNode(initial(cds), sidecar)), want: []string{"req 1 cds initial"}},
			{do: frame(1, initial(lds)), want: []string{"req 1 lds initial"}},
			{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{pushCDS(1, 1, true)}},
			{at: 10 * ms, do: frame(1, push(lds, 1, listener("virtualInbound"))), want: []string{pushLDS(1, true)}},
			{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
			{at: 20 * ms, do: frame(1, ack(lds, 1)), want: []string{"req 1 lds ack", "ended 1 lds v=1 ack 10ms"}},
			// CDS under a new version, unasked: a full push, alone in its minute.
			{at: 10 * time.Second, do: frame(1, push(cds, 2, cluster(reviews))), want: []string{
				"fullsync 1 20ms at=20ms [cds lds]", pushCDS(1, 2, false),
			}},
			{at: 10*time.Second + 10*ms, do: frame(1, ack(cds, 2)), want: []string{"req 1 cds ack", "ended 1 cds v=2 ack 10ms"}},
			// LDS of the same version moments later: the same push.
			{at: 11 * time.Second, do: frame(1, push(lds, 2, listener("virtualInbound"))), want: []string{pushLDS(2, false)}},
			{at: 11*time.Second + 10*ms, do: frame(1, ack(lds, 2)), want: []string{"req 1 lds ack", "ended 1 lds v=2 ack 10ms"}},
			// A second full push in the same minute raises the alarm.
			{at: 20 * time.Second, do: frame(1, push(cds, 3, cluster(reviews))), want: []string{
				pushCDS(1, 3, false), "start repeated_full_sync " + key + " count=2",
			}},
			{at: 20*time.Second + 500*ms, do: frame(1, push(lds, 3, listener("virtualInbound"))), want: []string{pushLDS(3, false)}},
			// The node reconnects: its new stream's initial sync does not count.
			{at: 21 * time.Second, do: closeStream(1, 14, ""), want: []string{
				"ended 1 cds v=3 closed 1s", "ended 1 lds v=3 closed 500ms", `close 1 code=14 "" node="` + sidecar + `"`,
			}},
			{at: 22 * time.Second, do: open(2, adsSotW), want: []string{"open 2 sotw"}},
			{at: 22 * time.Second, do: frame(2, withNode(initial(cds), sidecar)), want: []string{"req 2 cds initial"}},
			{at: 22 * time.Second, do: frame(2, push(cds, 6, cluster(reviews))), want: []string{pushCDS(2, 6, true)}},
			{at: 22 * time.Second, do: frame(2, ack(cds, 6)), want: []string{"req 2 cds ack", "ended 2 cds v=6 ack 0s"}},
			// Full pushes at 10s and 20s: two within the minute until 70s.
			{at: 70 * time.Second, do: tick(), want: []string{"fullsync 2 0s at=22s [cds]", "end repeated_full_sync " + key + " count=2 after 50s"}},
			{at: 71*time.Second + 500*ms, do: tick()},
			{at: 200 * time.Second, do: tick()},
		})
	})
}

func TestDecodeFailed(t *testing.T) {
	leakcheck.Check(t)
	_, err := codec.DecodeRequest([]byte{0x0a, 0xff}, false)
	if err == nil {
		t.Fatal("a truncated request decoded")
	}
	tr := track.New(track.Config{})
	run(t, tr, []step{
		{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
		{do: func(_ testing.TB, tr *track.Tracker, at time.Time) []track.Event {
			return tr.DecodeFailed(1, at, codec.DirectionRequest, err)
		}, want: []string{"decode-error 1 request: " + err.Error()}},
		// The stream's state is as it was.
		{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
	})
}
