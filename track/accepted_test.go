package track_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// acceptedHarness drives a tracker that hands accepted pushes over, the
// way pipeline.Observer does: each response in small pieces of a pool that
// scribbles over what is given back to it, decoded into one Response that
// is reused — and, right after the tracker has seen a push, used to decode
// another message, as the next frame would be. Views that outlived what
// they point into would read garbage.
type acceptedHarness struct {
	*keepHarness
	taker *track.Taker // takes every accepted push
	resp  codec.Response
	gets  int // buffers taken from the pool
}

// pieceSize cuts every cluster across pieces.
const pieceSize = 64

func newAcceptedHarness(t *testing.T, cfg track.Config, method string) *acceptedHarness {
	h := &acceptedHarness{}
	h.keepHarness = newKeepHarness(t, cfg, method, func(tr *track.Tracker) { h.taker = tr.TakeAccepted(track.Takes{}) })
	return h
}

// release releases the harness's taker's lease of a, taken now.
func (h *acceptedHarness) release(a *track.Accepted) {
	h.t.Helper()
	l := h.taker.Lease(a)
	if a != nil && l == nil {
		h.t.Fatal("the taker of every accepted push got no lease of one")
	}
	l.Release()
}

func (h *acceptedHarness) pieces(b []byte) mem.BufferSlice {
	var data mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), pieceSize)
		buf := h.pool.Get(n)
		h.gets++
		copy(*buf, b[:n])
		data = append(data, mem.NewBuffer(buf, h.pool))
		b = b[n:]
	}
	return data
}

func (h *acceptedHarness) send(m proto.Message) []track.Event {
	h.t.Helper()
	switch m.(type) {
	case *discoveryv3.DiscoveryRequest, *discoveryv3.DeltaDiscoveryRequest:
		return h.keepHarness.send(m)
	}
	h.at++
	b := mustMarshal(h.t, m)
	_, delta := m.(*discoveryv3.DeltaDiscoveryResponse)
	data := h.pieces(b)
	if err := h.resp.DecodeBuffers(data, delta); err != nil {
		h.t.Fatal(err)
	}
	evs := h.tr.ResponseFrame(1, h.now(), &h.resp, len(b), data)
	data.Free() // the tap's reference
	// The next frame, decoded into the same Response.
	other := h.pieces(mustMarshal(h.t, push(cds, 99, cluster("outbound|1||scribble-"+strings.Repeat("x", 200)))))
	if err := h.resp.DecodeBuffers(other, false); err != nil {
		h.t.Fatal(err)
	}
	other.Free()
	return evs
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// acceptedIn returns the Accepted of the PushEnded or LateAnswer among evs,
// and whether there was one.
func acceptedIn(evs []track.Event) (*track.Accepted, bool) {
	for _, e := range evs {
		switch e := e.(type) {
		case track.PushEnded:
			return e.Accepted, true
		case track.LateAnswer:
			return e.Accepted, true
		}
	}
	return nil, false
}

// resourceView is what a test expects of an AcceptedResource: the body as
// the push carried it, or nothing when the push was kept compact and the
// resource carried unchanged.
type resourceView struct {
	name      string
	body      []byte
	unchanged bool
}

func sotwViews(r *discoveryv3.DiscoveryResponse, unchanged ...int) []resourceView {
	var out []resourceView
	for i, a := range r.Resources {
		v := resourceView{body: a.Value}
		m, _ := a.UnmarshalNew()
		v.name = nameOf(m)
		for _, u := range unchanged {
			if u == i {
				v.body, v.unchanged = nil, true
			}
		}
		out = append(out, v)
	}
	return out
}

func checkAccepted(t *testing.T, a *track.Accepted, version string, replace bool, want []resourceView, removed ...string) {
	t.Helper()
	if a == nil {
		t.Fatal("an ACK handed nothing over")
	}
	if a.NotKept != "" || a.Version != version || a.Replace != replace || len(a.Resources) != len(want) || !slices.Equal(a.Removed, removed) {
		t.Fatalf("Accepted: not kept %q, version %q, replace %v, %d resources, removed %q; want kept, %q, %v, %d, %q",
			a.NotKept, a.Version, a.Replace, len(a.Resources), a.Removed, version, replace, len(want), removed)
	}
	for i, w := range want {
		got := a.Resources[i]
		if got.Name != w.name || got.Unchanged != w.unchanged || !bytes.Equal(got.Body, w.body) || got.TypeURL != cds {
			t.Errorf("resource %d: %q unchanged %v, %d bytes of %s (equal: %v); want %q unchanged %v, %d bytes",
				i, got.Name, got.Unchanged, len(got.Body), got.TypeURL, bytes.Equal(got.Body, w.body), w.name, w.unchanged, len(w.body))
		}
	}
}

// checkPartial checks a partial Accepted: only what the push added or
// changed (want, in push order), removed what it dropped, nothing replaced.
func checkPartial(t *testing.T, a *track.Accepted, version string, want []resourceView, removed ...string) {
	t.Helper()
	if a != nil && !a.Partial {
		t.Fatalf("Accepted of a push diffed against what the outputs were handed is not partial")
	}
	checkAccepted(t, a, version, false, changedViews(want), removed...)
}

// changedViews leaves out of views those carried unchanged.
func changedViews(views []resourceView) []resourceView {
	var out []resourceView
	for _, v := range views {
		if !v.unchanged {
			out = append(out, v)
		}
	}
	return out
}

// An ACK hands its push over as the tap decoded it: every resource whole
// for a push held by reference, only those it changed for one kept compact;
// a Delta push with its removals; a late ACK too. Nothing else does (a
// NACK, a newer push, the stream's end). Once released, nothing is kept
// and every buffer is back in the pool.
func TestAcceptedIsThePushAsDecoded(t *testing.T) {
	leakcheck.Check(t)
	t.Run("SotW", func(t *testing.T) {
		h := newAcceptedHarness(t, track.Config{}, adsSotW)
		h.send(initial(cds))
		v1 := push(cds, 1, shopClusters(false)...)
		h.send(v1)
		a, _ := acceptedIn(h.send(ack(cds, 1)))
		checkPartial(t, a, ver(1), sotwViews(v1))
		h.release(a)

		v2 := push(cds, 2, shopClusters(false, 3)...) // one cluster of eight changed: kept compact
		h.send(v2)
		a, _ = acceptedIn(h.send(ack(cds, 2)))
		checkPartial(t, a, ver(2), sotwViews(v2, 0, 1, 2, 4, 5, 6, 7))
		h.release(a)

		h.send(push(cds, 3, shopClusters(false, 4)...))
		nacked := h.send(nack(cds, 3, 2, "bad"))
		h.send(push(cds, 4, shopClusters(false, 5)...))
		superseded := h.send(push(cds, 5, shopClusters(false, 6)...))
		closed := h.tr.CloseStream(1, h.now(), 0, "")
		for name, evs := range map[string][]track.Event{"a NACK": nacked, "a newer push": superseded, "the stream's end": closed} {
			if a, ok := acceptedIn(evs); !ok || a != nil {
				t.Errorf("%s: the push ended (%v) with an Accepted %v, want none", name, ok, a)
			}
		}
		if got := h.tr.Kept().Bytes; got != 0 {
			t.Errorf("%d bytes still kept", got)
		}
		if got := h.pool.returned(); got != h.gets {
			t.Errorf("%d buffers of %d back in the pool", got, h.gets)
		}
	})
	t.Run("what a replacing push dropped", func(t *testing.T) {
		h := newAcceptedHarness(t, track.Config{}, adsSotW)
		h.send(initial(cds))
		h.send(push(cds, 1, shopClusters(false)...))
		a, _ := acceptedIn(h.send(ack(cds, 1)))
		h.release(a)
		v2 := push(cds, 2, shopClusters(false, 3)[:6]...) // one changed, the last two dropped
		h.send(v2)
		a, _ = acceptedIn(h.send(ack(cds, 2)))
		checkPartial(t, a, ver(2), sotwViews(v2, 0, 1, 2, 4, 5), shopCluster(6), shopCluster(7))
		h.release(a)
		// A push superseded before its answer is assumed applied: the next
		// one's diff is not vouched for, so it is handed over whole.
		h.send(push(cds, 3, shopClusters(false, 4)[:6]...))
		v4 := push(cds, 4, shopClusters(false, 5)...)
		h.send(v4)
		a, _ = acceptedIn(h.send(ack(cds, 4)))
		if a == nil || a.Partial {
			t.Fatalf("the ACK of a push after a superseded one handed %+v, want the whole push", a)
		}
		checkAccepted(t, a, ver(4), true, sotwViews(v4))
		h.release(a)
		h.tr.CloseStream(1, h.now(), 0, "")
		if got := h.tr.Kept().Bytes; got != 0 {
			t.Errorf("%d bytes still kept", got)
		}
	})
	t.Run("Delta", func(t *testing.T) {
		h := newAcceptedHarness(t, track.Config{}, adsDelta)
		h.send(dinitial(cds))
		all := shopClusters(false)
		v1 := dpush(cds, 1, []string{"gone"}, all[:3]...)
		h.send(v1)
		a, _ := acceptedIn(h.send(dack(cds, 1)))
		var want []resourceView
		for _, r := range v1.Resources {
			want = append(want, resourceView{name: r.Name, body: r.Resource.Value})
		}
		checkAccepted(t, a, ver(1), false, want, "gone")
		h.release(a)
	})
	t.Run("late ACK", func(t *testing.T) {
		h := newAcceptedHarness(t, track.Config{PushTimeout: time.Second}, adsSotW)
		h.send(initial(cds))
		v1 := push(cds, 1, shopClusters(false)...)
		h.send(v1)
		h.at += 200 // 2s
		h.tr.Tick(h.now())
		evs := h.send(ack(cds, 1))
		if _, ok := evs[len(evs)-1].(track.LateAnswer); !ok {
			t.Fatalf("the ACK after the timeout gave %T, want a LateAnswer", evs[len(evs)-1])
		}
		a, _ := acceptedIn(evs)
		checkPartial(t, a, ver(1), sotwViews(v1))
		h.release(a)
		if got := h.tr.Kept().Bytes; got != 0 {
			t.Errorf("%d bytes still kept", got)
		}
	})
	t.Run("over the bound", func(t *testing.T) {
		h := newAcceptedHarness(t, track.Config{KeepBytes: 100}, adsSotW)
		h.send(initial(cds))
		h.send(push(cds, 1, shopClusters(false)...))
		a, _ := acceptedIn(h.send(ack(cds, 1)))
		if a == nil || a.NotKept == "" || a.Resources != nil {
			t.Fatalf("an ACK of a push over --nack-keep-bytes handed %+v, want an Accepted that says why it holds nothing", a)
		}
		h.release(a)
	})
}

// TestAcceptedHasAnOwnerPerOutput: an ACK's push taken by two outputs (the
// retained configuration and the reference check, a lease each) and by
// tracing (its Changed) is kept until the last of the three lets go,
// whoever that is: before, its views read the push as it came (the pool
// scribbles over what is given back). A push superseded is leased to the
// taker that follows superseded pushes alone, and kept until it and
// tracing let go. Then nothing is kept and every buffer is back in the pool.
func TestAcceptedHasAnOwnerPerOutput(t *testing.T) {
	leakcheck.Check(t)
	var config, refs *track.Taker
	h := &acceptedHarness{}
	h.keepHarness = newKeepHarness(t, track.Config{}, adsSotW, func(tr *track.Tracker) {
		config = tr.TakeAccepted(track.Takes{})
		refs = tr.TakeAccepted(track.Takes{Superseded: true})
		tr.TakeChanged()
	})
	h.send(initial(cds))
	v1 := push(cds, 1, shopClusters(false)...)
	h.send(v1)
	acked := ended(t, h.send(ack(cds, 1)))
	v2 := push(cds, 2, shopClusters(true, 2, 3, 4, 5, 6, 7)...) // most changed: held whole
	h.send(v2)
	superseded := ended(t, h.send(push(cds, 3, shopClusters(false, 4)...)))
	if superseded.Result != track.ResultSuperseded {
		t.Fatalf("the newer push ended the previous one with %s", superseded.Result)
	}
	if l := config.Lease(superseded.Accepted); l != nil {
		t.Fatal("a taker of acknowledged pushes alone got a lease of a superseded one")
	}
	v2Views := sotwViews(v2)
	v2Views[1].unchanged = true // held whole: with its body
	ackedConfig, ackedRefs, supRefs := config.Lease(acked.Accepted), refs.Lease(acked.Accepted), refs.Lease(superseded.Accepted)
	for _, c := range []struct {
		e       track.PushEnded
		views   []resourceView
		release []func()
	}{
		{acked, sotwViews(v1), []func(){ackedConfig.Release, acked.Changed.Release, ackedRefs.Release}},
		{superseded, v2Views, []func(){superseded.Changed.Release, supRefs.Release}},
	} {
		for _, release := range c.release[:len(c.release)-1] {
			release()
			checkPartial(t, c.e.Accepted, c.e.Push.Version, c.views)
		}
		c.release[len(c.release)-1]()
	}
	for _, e := range h.tr.CloseStream(1, h.now(), 0, "") {
		if e, ok := e.(track.PushEnded); ok {
			e.Changed.Release()
		}
	}
	if got := h.tr.Kept().Bytes; got != 0 {
		t.Errorf("%d bytes still kept", got)
	}
	if got := h.pool.returned(); got != h.gets {
		t.Errorf("%d buffers of %d back in the pool", got, h.gets)
	}
}

// ended is the PushEnded of evs.
func ended(t *testing.T, evs []track.Event) track.PushEnded {
	t.Helper()
	for _, e := range evs {
		if e, ok := e.(track.PushEnded); ok {
			if e.Accepted == nil || e.Changed == nil {
				t.Fatalf("a push ended (%s) with Accepted %v and Changed %v, want both", e.Result, e.Accepted != nil, e.Changed != nil)
			}
			return e
		}
	}
	t.Fatal("no push ended")
	return track.PushEnded{}
}

// TestLeaseOnlyForWhatATakerTakes: each taker is leased the accepted pushes
// of the types it takes, once, and a superseded push only when it follows
// those; a type no taker takes is handed over to none, and what a push
// kept is given back when the leases it was handed to are released, not
// before.
func TestLeaseOnlyForWhatATakerTakes(t *testing.T) {
	leakcheck.Check(t)
	var clusters, listeners, all, acks *track.Taker
	h := &acceptedHarness{}
	h.keepHarness = newKeepHarness(t, track.Config{}, adsSotW, func(tr *track.Tracker) {
		clusters = tr.TakeAccepted(track.Takes{Types: func(u string) bool { return u == cds }})
		listeners = tr.TakeAccepted(track.Takes{Types: func(u string) bool { return u == lds }})
		all = tr.TakeAccepted(track.Takes{Types: func(u string) bool { return u != eds }, Superseded: true})
		acks = tr.TakeAccepted(track.Takes{Types: func(u string) bool { return u != eds }})
	})
	h.send(initial(cds))
	h.send(push(cds, 1, shopClusters(false)...))
	acked, _ := acceptedIn(h.send(ack(cds, 1)))
	h.send(push(cds, 2, shopClusters(false, 3)...))
	superseded, _ := acceptedIn(h.send(push(cds, 3, shopClusters(false, 4)...)))
	h.send(initial(eds, "a"))
	h.send(push(eds, 1, endpoint("a", "10.0.0.1")))
	untaken, _ := acceptedIn(h.send(ack(eds, 1)))

	type lease struct {
		push  string
		taker string
	}
	takers := map[string]*track.Taker{"clusters": clusters, "listeners": listeners, "all": all, "acks": acks}
	pushes := map[string]*track.Accepted{"acked": acked, "superseded": superseded}
	for _, c := range []struct {
		lease
		want bool
	}{
		{lease{"acked", "clusters"}, true},
		{lease{"acked", "listeners"}, false},
		{lease{"acked", "all"}, true},
		{lease{"acked", "acks"}, true}, // a third lease of the push
		{lease{"superseded", "clusters"}, false},
		{lease{"superseded", "listeners"}, false},
		{lease{"superseded", "all"}, true},
		{lease{"superseded", "acks"}, false},
	} {
		l := takers[c.taker].Lease(pushes[c.push])
		if got := l != nil; got != c.want {
			t.Errorf("%s.Lease(%s push) = %v, want a lease %v", c.taker, c.push, l, c.want)
		}
		if again := takers[c.taker].Lease(pushes[c.push]); again != nil {
			t.Errorf("%s leased the %s push twice", c.taker, c.push)
		}
		if l != nil && h.tr.Kept().Bytes == 0 {
			t.Errorf("nothing kept while %s holds a lease of the %s push", c.taker, c.push)
		}
		l.Release()
		l.Release() // a second release does nothing
	}
	if untaken != nil {
		t.Errorf("an ACK of a type no taker takes handed over %+v", untaken)
	}
	h.tr.CloseStream(1, h.now(), 0, "")
	if got := h.tr.Kept().Bytes; got != 0 {
		t.Errorf("%d bytes still kept once every lease was released", got)
	}
	if got := h.pool.returned(); got != h.gets {
		t.Errorf("%d buffers of %d back in the pool", got, h.gets)
	}
}

// One output takes the changed pushes: a second taker would read bytes the
// first let go of, so taking them twice is a programming error said at once.
func TestTakeChangedOnce(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	tr.TakeChanged()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "TakeChanged called twice") {
			t.Errorf("a second TakeChanged: recovered %v, want a panic naming it", r)
		}
	}()
	tr.TakeChanged()
}
