package track_test

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
)

// TestStreamsSharingAStateChangeAlone syncs three streams on the same
// endpoints, which the tracker holds once for all of them from the next
// tick, and moves each elsewhere: one rejects the next push, one accepts
// it, one is not sent it. Each stream's CSDS view and its next diff are its
// own.
func TestStreamsSharingAStateChangeAlone(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{Resources: true})
	ns := names("outbound|80||svc", 20)
	endpoints := func(ip string) []proto.Message { return endpointsOf(ns, ip) }
	do := stepper(t, tr)
	changed := func(evs []track.Event) string {
		for _, e := range evs {
			if p, ok := e.(track.PushSent); ok {
				d := p.Push.Diff
				return fmt.Sprintf("+%d -%d ~%d =%d", d.Added, d.Removed, d.Changed, d.Unchanged)
			}
		}
		t.Fatalf("no push among %v", describeAll(evs, false))
		return ""
	}
	for id := uint64(1); id <= 3; id++ {
		do(open(id, adsSotW))
		do(frame(id, withNode(initial(eds, ns...), sidecar)))
		if got, want := changed(do(frame(id, push(eds, 1, endpoints("10.0.0.1")...)))), "+20 -0 ~0 =0"; got != want {
			t.Fatalf("stream %d's first push: %s, want %s", id, got, want)
		}
		do(frame(id, ack(eds, 1, ns...)))
	}
	do(tick())
	for id := uint64(2); id <= 3; id++ {
		if acked, table := tr.SharedWith(1, id, eds); !acked || !table {
			t.Fatalf("streams 1 and %d synced on the same endpoints share their acknowledged state %v, their table %v", id, acked, table)
		}
	}
	do(frame(1, push(eds, 2, endpoints("10.0.0.2")...)))
	do(frame(1, nack(eds, 2, 1, "no", ns...)))
	do(frame(2, push(eds, 2, endpoints("10.0.0.2")...)))
	do(frame(2, ack(eds, 2, ns...)))
	do(tick())

	versions := map[uint64]map[string]int{}
	for _, c := range tr.ClientResources(nil, true) {
		versions[c.StreamID] = map[string]int{}
		for _, r := range c.Resources {
			line := fmt.Sprintf("%s v=%s", r.Status, short(r.Version))
			if r.ErrorDetails != "" {
				line += " err=" + short(r.ErrorVersion)
			}
			versions[c.StreamID][line]++
		}
	}
	want := map[uint64]map[string]int{
		1: {fmt.Sprintf("%s v=1 err=2", track.ClientNACKed): 20},
		2: {fmt.Sprintf("%s v=2", track.ClientACKed): 20},
		3: {fmt.Sprintf("%s v=1", track.ClientACKed): 20},
	}
	if diff := cmp.Diff(want, versions); diff != "" {
		t.Fatalf("what each stream's client holds (-want +got):\n%s", diff)
	}

	// The next push's diff is against each stream's own state.
	for id, want := range map[uint64]string{1: "+0 -0 ~20 =0", 2: "+0 -0 ~0 =20", 3: "+0 -0 ~20 =0"} {
		if got := changed(do(frame(id, push(eds, 3, endpoints("10.0.0.2")...)))); got != want {
			t.Errorf("stream %d: a push of what stream 2 accepted is %s, want %s", id, got, want)
		}
	}
}

// TestFirstSyncSharesTheStateAtOnce syncs two streams on the same clusters
// (a push that replaces its type) and endpoints (one that merges into it):
// from their ACKs on they hold one acknowledged state of each, before any
// tick, and a change to one stream's state is its own.
func TestFirstSyncSharesTheStateAtOnce(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	ns := names("outbound|80||first", 20)
	var clusters, endpoints []proto.Message
	for _, n := range ns {
		clusters = append(clusters, cluster(n))
		endpoints = append(endpoints, endpoint(n, "10.0.0.1"))
	}
	do := stepper(t, tr)
	for id := uint64(1); id <= 2; id++ {
		do(open(id, adsSotW))
		do(frame(id, withNode(initial(cds), sidecar)))
		do(frame(id, push(cds, 1, clusters...)))
		do(frame(id, ack(cds, 1)))
		do(frame(id, initial(eds, ns...)))
		do(frame(id, push(eds, 1, endpoints...)))
		do(frame(id, ack(eds, 1, ns...)))
	}
	for _, typeURL := range []string{cds, eds} {
		if acked, _ := tr.SharedWith(1, 2, typeURL); !acked {
			t.Fatalf("two streams synced on the same %s hold their acknowledged states apart until a tick", typeURL)
		}
	}

	changed := slices.Clone(clusters)
	changed[3] = clusterV2(ns[3])
	do(frame(1, push(cds, 2, changed...)))
	do(frame(1, ack(cds, 2)))
	if acked, _ := tr.SharedWith(1, 2, cds); acked {
		t.Fatal("a stream that accepted a change still holds the other stream's state")
	}
	for id, want := range map[uint64]string{1: "~0 =20", 2: "~1 =19"} {
		var got string
		for _, e := range do(frame(id, push(cds, 3, changed...))) {
			if p, ok := e.(track.PushSent); ok {
				got = fmt.Sprintf("~%d =%d", p.Push.Diff.Changed, p.Push.Diff.Unchanged)
			}
		}
		if got != want {
			t.Errorf("stream %d: a push of what stream 1 accepted is %q, want %q", id, got, want)
		}
	}
}

// TestSubscriptionsShareTheirNames subscribes streams to the same
// endpoints: SotW ones hold one list from their requests on, a Delta one
// from the tick after its last change; a change to one stream's list is
// its own.
func TestSubscriptionsShareTheirNames(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	ns := names("outbound|80||first", 20)
	do := stepper(t, tr)
	for id := uint64(1); id <= 2; id++ {
		do(open(id, adsSotW))
		do(frame(id, withNode(initial(eds, ns...), sidecar)))
	}
	if _, shared := tr.Subscribed(1, 2, eds); !shared {
		t.Fatal("two SotW streams subscribed to the same endpoints hold their lists apart")
	}
	do(frame(1, initial(eds, ns[1:]...)))
	got1, shared := tr.Subscribed(1, 2, eds)
	got2, _ := tr.Subscribed(2, 1, eds)
	if shared || !slices.Equal(got1, ns[1:]) || !slices.Equal(got2, ns) {
		t.Fatalf("after stream 1 dropped %s: stream 1 has %d names, stream 2 %d, shared %v; want 19, 20, apart",
			ns[0], len(got1), len(got2), shared)
	}

	for id := uint64(3); id <= 4; id++ {
		do(open(id, adsDelta))
		do(frame(id, dinitial(eds, ns[:10]...)))
		do(frame(id, dsub(eds, 0, ns[10:], nil)))
	}
	do(tick())
	if _, shared := tr.Subscribed(3, 4, eds); !shared {
		t.Fatal("two Delta streams subscribed to the same endpoints hold their lists apart after a tick")
	}
	do(frame(3, dsub(eds, 0, nil, ns[:1])))
	got3, shared := tr.Subscribed(3, 4, eds)
	got4, _ := tr.Subscribed(4, 3, eds)
	if shared || len(got3) != 19 || len(got4) != 20 {
		t.Fatalf("after stream 3 unsubscribed %s: stream 3 has %d names, stream 4 %d, shared %v; want 19, 20, apart",
			ns[0], len(got3), len(got4), shared)
	}
}

// stepper returns what plays an action on tr, a millisecond after the one
// before, from t0.
func stepper(t *testing.T, tr *track.Tracker) func(action) []track.Event {
	at := t0
	return func(a action) []track.Event {
		at = at.Add(time.Millisecond)
		return a(t, tr, at)
	}
}

// TestStreamsSentTheSamePushLoadItOnce syncs four streams on the same
// endpoints, then sends each the same change at once, as a control plane
// does to a mesh: the pushes in flight read one loaded list of resources.
// Then each stream goes its own way (a NACK, an ACK, a subscription change
// before the ACK, a push superseding it): every stream's events and CSDS
// view are what a stream alone sent the same gets.
func TestStreamsSentTheSamePushLoadItOnce(t *testing.T) {
	leakcheck.Check(t)
	ns := names("outbound|80||fan", 20)
	endpoints := func(ip string) []proto.Message { return endpointsOf(ns, ip) }
	sync := func(id uint64) []action {
		return []action{open(id, adsSotW), frame(id, withNode(initial(eds, ns...), sidecar)),
			frame(id, push(eds, 1, endpoints("10.0.0.1")...)), frame(id, ack(eds, 1, ns...))}
	}
	change := func(id uint64) action { return frame(id, push(eds, 2, endpoints("10.0.0.2")...)) }
	// What each stream does after the change, and the push that follows.
	after := map[uint64][]action{
		1: {frame(1, nack(eds, 2, 1, "no", ns...))},
		2: {frame(2, ack(eds, 2, ns...))},
		3: {frame(3, initial(eds, ns[:10]...)), frame(3, ack(eds, 2, ns[:10]...))},
		4: {frame(4, push(eds, 3, endpoints("10.0.0.3")...)), frame(4, ack(eds, 3, ns...))},
	}
	next := func(id uint64) action { return frame(id, push(eds, 4, endpoints("10.0.0.2")...)) }
	csds := func(tr *track.Tracker, id uint64) []string {
		for _, c := range tr.ClientResources(nil, true) {
			if c.StreamID == id {
				var out []string
				for _, r := range c.Resources {
					out = append(out, fmt.Sprintf("%s %s v=%s err=%s", r.Name, r.Status, short(r.Version), short(r.ErrorVersion)))
				}
				return out
			}
		}
		return nil
	}

	tr := track.New(track.Config{Resources: true})
	do := stepper(t, tr)
	for id := uint64(1); id <= 4; id++ {
		for _, a := range sync(id) {
			do(a)
		}
	}
	got := map[uint64][]string{}
	for id := uint64(1); id <= 4; id++ {
		got[id] = describeAll(do(change(id)), false)
	}
	for id := uint64(2); id <= 4; id++ {
		if !tr.LoadedShared(1, id, eds) {
			t.Errorf("streams 1 and %d, sent the same push against the same state, load it apart", id)
		}
	}
	for id := uint64(1); id <= 4; id++ {
		for _, a := range after[id] {
			got[id] = append(got[id], describeAll(do(a), false)...)
		}
		got[id] = append(got[id], describeAll(do(next(id)), false)...)
		got[id] = append(got[id], csds(tr, id)...)
	}

	for id := uint64(1); id <= 4; id++ {
		alone := track.New(track.Config{Resources: true})
		do := stepper(t, alone)
		for _, a := range sync(id) {
			do(a)
		}
		want := describeAll(do(change(id)), false)
		for _, a := range after[id] {
			want = append(want, describeAll(do(a), false)...)
		}
		want = append(want, describeAll(do(next(id)), false)...)
		want = append(want, csds(alone, id)...)
		// The latencies differ: the streams among others waited longer.
		latency := regexp.MustCompile(` [0-9.]+m?s( |$)`)
		for _, lines := range [][]string{want, got[id]} {
			for i, l := range lines {
				lines[i] = latency.ReplaceAllString(l, "$1")
			}
		}
		if diff := cmp.Diff(want, got[id]); diff != "" {
			t.Errorf("stream %d, events and CSDS view (-alone +among streams sent the same):\n%s", id, diff)
		}
	}
}

// endpointsOf are an assignment of ip for each of ns.
func endpointsOf(ns []string, ip string) []proto.Message {
	var out []proto.Message
	for _, n := range ns {
		out = append(out, endpoint(n, ip))
	}
	return out
}

// TestStreamsAnsweringTheSamePushShareAtOnce syncs three streams on the
// same endpoints and sends two of them the same change: once both ACKed,
// they hold one acknowledged state and one table again before any tick,
// the copies each made going back for the next stream's. A second change
// to one of them before the tick is left to the tick, and so is a change
// to a stream whose state no other was found holding.
func TestStreamsAnsweringTheSamePushShareAtOnce(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{Resources: true})
	ns := names("outbound|80||answer", 20)
	do := stepper(t, tr)
	for id := uint64(1); id <= 3; id++ {
		do(open(id, adsSotW))
		do(frame(id, withNode(initial(eds, ns...), sidecar)))
		do(frame(id, push(eds, 1, endpointsOf(ns, "10.0.0.1")...)))
		do(frame(id, ack(eds, 1, ns...)))
	}
	do(tick())
	for id := uint64(1); id <= 2; id++ {
		do(frame(id, push(eds, 2, endpointsOf(ns, "10.0.0.2")...)))
		do(frame(id, ack(eds, 2, ns...)))
	}
	if acked, table := tr.SharedWith(1, 2, eds); !acked || !table {
		t.Errorf("two streams that accepted the same change share their acknowledged state %v, their table %v; want both at once", acked, table)
	}
	if acked, _ := tr.SharedWith(1, 3, eds); acked {
		t.Error("a stream that accepted a change shares its state with one that was not sent it")
	}

	// A second change to stream 2 before the tick: its own until the tick.
	do(frame(2, push(eds, 3, endpointsOf(ns, "10.0.0.3")...)))
	do(frame(2, ack(eds, 3, ns...)))
	do(frame(3, push(eds, 3, endpointsOf(ns, "10.0.0.3")...)))
	do(frame(3, ack(eds, 3, ns...)))
	if acked, _ := tr.SharedWith(2, 3, eds); acked {
		t.Error("a stream changed twice since the tick shares its state at once, want at the tick")
	}
	do(tick())
	// (Their tables differ: stream 2's stamps went through one more version.)
	if acked, _ := tr.SharedWith(2, 3, eds); !acked {
		t.Error("after the tick, streams with the same acknowledged state do not share it")
	}

	// A stream alone: a change is left to the tick.
	lone := names("outbound|80||lone", 20)
	do(open(4, adsSotW))
	do(frame(4, withNode(initial(eds, lone...), sidecar)))
	do(frame(4, push(eds, 1, endpointsOf(lone, "10.0.0.1")...)))
	do(frame(4, ack(eds, 1, lone...)))
	do(tick())
	do(frame(4, push(eds, 2, endpointsOf(lone, "10.0.0.2")...)))
	do(frame(4, ack(eds, 2, lone...)))
	if tr.StateShared(4, eds) {
		t.Error("a stream whose state no other shared looks its change up at once, want at the tick")
	}
	do(tick())
	if !tr.StateShared(4, eds) {
		t.Error("after the tick, a lone stream's state is not looked up")
	}
}
