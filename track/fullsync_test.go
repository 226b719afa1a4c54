package track_test

import (
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func TestTimeToFullSync(t *testing.T) {
	leakcheck.Check(t)
	runScenarios(t, []scenario{
		{
			// Envoy asks for EDS once clusters arrive and for RDS once
			// listeners do: each ACK that completes the known types is
			// only a candidate until a second passes with no new type.
			name: "CDS, EDS, LDS, RDS chain settles after the last ACK",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, withNode(initial(cds), sidecar)), want: []string{"req 1 cds initial"}},
				{at: 5 * ms, do: frame(1, push(cds, 1, cluster(reviews), cluster(ratings))), want: []string{
					"push 1 cds v=1 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 15ms"}},
				{at: 30 * ms, do: frame(1, initial(eds, reviews, ratings)), want: []string{"req 1 eds initial"}},
				{at: 35 * ms, do: frame(1, push(eds, 1, endpoint(reviews, "10.0.0.1"), endpoint(ratings, "10.0.0.2"))), want: []string{
					"push 1 eds v=1 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 50 * ms, do: frame(1, ack(eds, 1, reviews, ratings)), want: []string{"req 1 eds ack", "ended 1 eds v=1 ack 15ms"}},
				{at: 60 * ms, do: frame(1, initial(lds)), want: []string{"req 1 lds initial"}},
				{at: 65 * ms, do: frame(1, push(lds, 1, listener("0.0.0.0_9080"))), want: []string{
					"push 1 lds v=1 res=1 +1 -0 ~0 =0 +[0.0.0.0_9080] full initial",
				}},
				{at: 80 * ms, do: frame(1, ack(lds, 1)), want: []string{"req 1 lds ack", "ended 1 lds v=1 ack 15ms"}},
				// A subscription change of a known type cancels nothing.
				{at: 85 * ms, do: frame(1, ack(eds, 1, reviews)), want: []string{"req 1 eds ack +sub"}},
				{at: 90 * ms, do: frame(1, initial(rds, "9080")), want: []string{"req 1 rds initial"}},
				{at: 95 * ms, do: frame(1, push(rds, 1, route("9080"))), want: []string{
					"push 1 rds v=1 res=1 +1 -0 ~0 =0 +[9080] full initial",
				}},
				{at: 120 * ms, do: frame(1, ack(rds, 1, "9080")), want: []string{"req 1 rds ack", "ended 1 rds v=1 ack 25ms"},
					check: func(t *testing.T, tr *track.Tracker) {
						if got := tr.Streams("")[0].FullSyncSeconds; got != nil {
							t.Errorf("FullSyncSeconds before settling = %v, want nil", *got)
						}
					}},
				{at: 1119 * ms, do: tick()},
				{at: 1120 * ms, do: tick(), want: []string{"fullsync 1 120ms at=120ms [cds eds lds rds]"},
					check: func(t *testing.T, tr *track.Tracker) {
						got := tr.Streams("")[0].FullSyncSeconds
						if got == nil || *got != 0.12 {
							t.Errorf("FullSyncSeconds = %v, want 0.12", got)
						}
					}},
				// Once per stream.
				{at: 2 * time.Second, do: frame(1, initial(sds, "default")), want: []string{"req 1 sds initial"}},
				{at: 2010 * ms, do: frame(1, push(sds, 2)), want: []string{"push 1 sds v=2 res=0 +0 -0 ~0 =0"}},
				{at: 2020 * ms, do: frame(1, ack(sds, 2, "default")), want: []string{"req 1 sds ack", "ended 1 sds v=2 ack 10ms"}},
				{at: 5 * time.Second, do: tick()},
			},
		},
		{
			name: "a type requested before the candidate settles cancels it",
			steps: []step{
				{at: 100 * ms, do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{at: 100 * ms, do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 110 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 120 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				{at: 1110 * ms, do: frame(1, initial(eds, reviews)), want: []string{"req 1 eds initial"}},
				{at: 1119 * ms, do: tick()},
				{at: 1120 * ms, do: tick()},
				{at: 1200 * ms, do: frame(1, push(eds, 3, endpoint(reviews, "10.0.0.1"))), want: []string{
					"push 1 eds v=3 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 1300 * ms, do: frame(1, ack(eds, 3, reviews)), want: []string{"req 1 eds ack", "ended 1 eds v=3 ack 100ms"}},
				{at: 2300 * ms, do: tick(), want: []string{"fullsync 1 1.2s at=1.3s [cds eds]"}},
			},
		},
		{
			name: "syncz neither cancels a candidate nor holds it back",
			steps: []step{
				{at: 100 * ms, do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{at: 100 * ms, do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 110 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 120 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				{at: 1000 * ms, do: frame(1, initial(syncz)), want: []string{"req 1 syncz initial"}},
				{at: 1010 * ms, do: frame(1, push(syncz, 2)), want: []string{"push 1 syncz v=2 res=0 +0 -0 ~0 =0"}},
				{at: 1120 * ms, do: tick(), want: []string{"fullsync 1 20ms at=120ms [cds]"}},
			},
		},
		{
			name: "an unanswered push holds completion back; closing settles a candidate",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, initial(lds)), want: []string{"req 1 lds initial"}},
				{at: 30 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 20ms"}},
				{at: 40 * ms, do: frame(1, push(lds, 2, listener("virtualInbound"))), want: []string{
					"push 1 lds v=2 res=1 +1 -0 ~0 =0 +[virtualInbound] full initial",
				}},
				{at: 5 * time.Second, do: tick()},
				{at: 6 * time.Second, do: frame(1, ack(lds, 2)), want: []string{"req 1 lds ack", "ended 1 lds v=2 ack 5.96s"}},
				{at: 6100 * ms, do: closeStream(1, 0, ""), want: []string{"fullsync 1 6s at=6s [cds lds]", `close 1 code=0 "" node=""`}},
			},
		},
		{
			// Behind istio-agent, the agent asks on the Envoy's stream for
			// health (never answered), NDS and PCDS (answered only in some
			// meshes). None of it is the proxy's configuration.
			name: "istio-agent's own requests neither hold back nor cancel the full sync",
			steps: []step{
				{at: 100 * ms, do: open(1, adsDelta), want: []string{"open 1 delta"}},
				{at: 100 * ms, do: frame(1, dinitial(cds)), want: []string{"req 1 cds initial"}},
				{at: 110 * ms, do: frame(1, dpush(cds, 1, nil, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 120 * ms, do: frame(1, dack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				{at: 500 * ms, do: frame(1, dinitial(codec.TypeProxyConfig)), want: []string{"req 1 pcds initial"}},
				{at: 600 * ms, do: frame(1, dinitial(codec.TypeHealthInfo)), want: []string{"req 1 health initial"}},
				{at: 700 * ms, do: frame(1, dinitial(codec.TypeNameTable)), want: []string{"req 1 nds initial"}},
				{at: 1120 * ms, do: tick(), want: []string{"fullsync 1 20ms at=120ms [cds]"}},
			},
		},
		{
			name: "istioctl's syncz stream never completes",
			steps: []step{
				{do: open(7, adsSotW), want: []string{"open 7 sotw"}},
				{do: frame(7, initial(syncz)), want: []string{"req 7 syncz initial"}},
				{at: 10 * ms, do: frame(7, push(syncz, 1)), want: []string{"push 7 syncz v=1 res=0 +0 -0 ~0 =0"}},
				{at: 20 * ms, do: frame(7, ack(syncz, 1)), want: []string{"req 7 syncz ack", "ended 7 syncz v=1 ack 10ms"}},
				{at: 5 * time.Second, do: tick()},
				{at: 6 * time.Second, do: closeStream(7, 0, ""), want: []string{`close 7 code=0 "" node=""`}},
			},
		},
	})
}
