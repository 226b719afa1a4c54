package track_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	"google.golang.org/protobuf/proto"
)

func TestPushDiff(t *testing.T) {
	leakcheck.Check(t)
	runScenarios(t, []scenario{
		{
			// A malformed push naming a resource twice must not count it twice.
			name: "a name twice in one push",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews), cluster(ratings))), want: []string{
					"push 1 cds v=1 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				{at: 30 * ms, do: frame(1, push(cds, 2, cluster(reviews), clusterV2(reviews))), want: []string{
					"push 1 cds v=2 res=2 +0 -1 ~0 =1 " + plus("-", ratings) + " full",
				}},
			},
		},
		{
			name: "name lists are capped, counts are not",
			cfg:  track.Config{MaxNames: 2},
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster("c"), cluster("a"), cluster("d"), cluster("b"))), want: []string{
					"push 1 cds v=1 res=4 +4 -0 ~0 =0 +[c a] full initial",
				}},
				{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				// Removed names are a sorted sample.
				{at: 30 * ms, do: frame(1, push(cds, 2, cluster("e"))), want: []string{
					"push 1 cds v=2 res=1 +1 -4 ~0 =0 +[e] -[a b] full",
				}},
			},
		},
	})
}

// A push costs the same whatever the number of resources it carries, as long
// as their names are known: from the acknowledged state (EDS updates of the
// same clusters) or from the previous push (content rejected, then changed
// and rejected again).
func TestPushAllocationsDoNotDependOnResources(t *testing.T) {
	leakcheck.Check(t)
	const resources, cycles = 200, 50
	clusters := make([]string, resources)
	for i := range clusters {
		clusters[i] = fmt.Sprintf("outbound|9080||svc-%03d.default.svc.cluster.local", i)
	}
	frames := func(n int) *codec.Response {
		var res []proto.Message
		for _, c := range clusters {
			res = append(res, endpoint(c, fmt.Sprintf("10.%d.%d.%d", n/256, n%256, len(res)%256)))
		}
		return decodedPush(t, push(eds, n, res...))
	}
	for _, answer := range []string{"ack", "nack"} {
		t.Run(answer, func(t *testing.T) {
			tr := track.New(track.Config{})
			tr.OpenStream(track.StreamMeta{ID: 1, Method: adsSotW, OpenedAt: t0})
			frame(1, initial(eds, clusters...))(t, tr, t0)
			pushes := make([]*codec.Response, cycles+1)
			answers := make([]*codec.Request, cycles+1)
			for n := 1; n <= cycles; n++ {
				pushes[n] = frames(n)
				var err error
				m := ack(eds, n, clusters...)
				if answer == "nack" {
					m = nack(eds, n, 0, "rejected", clusters...)
				}
				b, _ := proto.Marshal(m)
				if answers[n], err = codec.DecodeRequest(b, false); err != nil {
					t.Fatal(err)
				}
			}
			at := t0
			n := 1
			playOne := func() {
				at = at.Add(time.Millisecond)
				tr.Response(1, at, pushes[n], 1000)
				tr.Request(1, at, answers[n], 100)
				n++
			}
			for n < 10 {
				playOne()
			}
			// The tracker's own allocations per cycle, by
			// testing.AllocsPerRun on the cycle itself, not the whole
			// process's counters; it makes runs+1 cycles: 10 to cycles.
			per := testing.AllocsPerRun(cycles-10, playOne)
			if n != cycles+1 {
				t.Fatalf("played pushes up to %d, want %d", n-1, cycles)
			}
			t.Logf("%.1f allocations per push and %s of %d resources", per, answer, resources)
			// Events and capped name lists; a copied name per resource would be 200.
			if per > 25 {
				t.Errorf("%.1f allocations per push and %s of %d resources, want at most 25", per, answer, resources)
			}
		})
	}
}

// TestPushEventsShareOneUnchangingPush: a push's PushSent and its ending
// carry the same Push, and the pushes that follow on the stream (which
// reuse the tracker's own state for the type) leave it as it was sent:
// outputs keep it, on other goroutines, for as long as they like.
func TestPushEventsShareOneUnchangingPush(t *testing.T) {
	leakcheck.Check(t)
	for _, answer := range []string{"ack", "nack", "superseded"} {
		t.Run(answer, func(t *testing.T) {
			tr := track.New(track.Config{})
			at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
			open(1, adsSotW)(t, tr, at(0))
			frame(1, initial(cds))(t, tr, at(0))
			var sent *track.Push
			for _, e := range frame(1, push(cds, 1, cluster(reviews), cluster(ratings)))(t, tr, at(10)) {
				if s, ok := e.(track.PushSent); ok {
					sent = s.Push
				}
			}
			if sent == nil {
				t.Fatal("no PushSent for the first push")
			}
			want := *sent
			var evs []track.Event
			switch answer {
			case "ack":
				evs = frame(1, ack(cds, 1))(t, tr, at(20))
			case "nack":
				evs = frame(1, nack(cds, 1, 0, "rejected"))(t, tr, at(20))
			}
			evs = append(evs, frame(1, push(cds, 2, cluster(reviews)))(t, tr, at(30))...)
			evs = append(evs, frame(1, ack(cds, 2))(t, tr, at(40))...)
			evs = append(evs, frame(1, push(cds, 3, clusterV2(reviews), cluster(ratings)))(t, tr, at(50))...)
			var ended *track.Push
			for _, e := range evs {
				if e, ok := e.(track.PushEnded); ok && e.Push.Version == ver(1) {
					ended = e.Push
				}
			}
			if ended != sent {
				t.Errorf("the first push's PushEnded carries %p, want its PushSent's %p", ended, sent)
			}
			if !reflect.DeepEqual(*sent, want) {
				t.Errorf("the first push, as the next pushes left it:\n%+v\nwant, as it was sent:\n%+v", *sent, want)
			}
		})
	}
}
