package track_test

import (
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

func dinitialNode(typeURL, id string, subscribe ...string) *discoveryv3.DeltaDiscoveryRequest {
	r := dinitial(typeURL, subscribe...)
	r.Node = envoyNode(id)
	return r
}

func TestDelta(t *testing.T) {
	leakcheck.Check(t)
	runScenarios(t, []scenario{
		{
			name: "wildcard CDS, spontaneous EDS subscriptions, removed_resources",
			steps: []step{
				{do: open(1, adsDelta), want: []string{"open 1 delta"}},
				{do: frame(1, dinitialNode(cds, sidecar)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, dpush(cds, 1, nil, cluster(reviews), cluster(ratings), cluster(details))), want: []string{
					"push 1 cds v=1 res=3 +3 -0 ~0 =0 " + plus("+", reviews, ratings, details) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, dack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				{at: 25 * ms, do: frame(1, dinitial(eds, reviews, ratings)), want: []string{"req 1 eds initial"}},
				{at: 30 * ms, do: frame(1, dpush(eds, 2, nil, endpoint(reviews, "10.0.0.1"), endpoint(ratings, "10.0.0.2"))), want: []string{
					"push 1 eds v=2 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 40 * ms, do: frame(1, dack(eds, 2)), want: []string{"req 1 eds ack", "ended 1 eds v=2 ack 10ms"}},
				// A true delta: one cluster changed, one removed, one untouched.
				{at: 500 * ms, do: frame(1, dpush(cds, 3, []string{ratings, "never-sent"}, clusterV2(reviews))), want: []string{
					"push 1 cds v=3 res=1 +0 -1 ~1 =0 " + plus("-", ratings) + " " + plus("~", reviews),
				}},
				{at: 510 * ms, do: frame(1, dsub(eds, 0, nil, []string{ratings})), want: []string{"req 1 eds subscription +sub"}},
				{at: 520 * ms, do: frame(1, dack(cds, 3)), want: []string{"req 1 cds ack", "ended 1 cds v=3 ack 20ms"}},
				{at: 600 * ms, do: frame(1, dsub(eds, 0, []string{details}, nil)), want: []string{"req 1 eds subscription +sub"}},
				{at: 610 * ms, do: frame(1, dpush(eds, 4, nil, endpoint(details, "10.0.0.3"))), want: []string{
					"push 1 eds v=4 res=1 +1 -0 ~0 =0 " + plus("+", details),
				}},
				// Unsubscribing everything, in the ACK of the last push.
				{at: 620 * ms, do: frame(1, dsub(eds, 4, nil, []string{reviews, details})), want: []string{
					"req 1 eds unsubscribe +sub", "ended 1 eds v=4 ack 10ms",
				}, check: func(t *testing.T, tr *track.Tracker) {
					wantType(1, cds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(3), LastSentNonce: nonce(3),
						LastAckedVersion: ver(3), LastAckedNonce: nonce(3),
						Pushes: 2, ACKs: 2, FullSyncs: 1, Subscribed: []string{"*"}, Resources: 2,
					})(t, tr)
					wantType(1, eds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(4), LastSentNonce: nonce(4),
						LastAckedVersion: ver(4), LastAckedNonce: nonce(4),
						Pushes: 2, ACKs: 2, FullSyncs: 1, Subscribed: []string{}, Resources: 0,
					})(t, tr)
				}},
			},
		},
		{
			name: "a stale nonce still changes the subscription",
			steps: []step{
				{do: open(1, adsDelta), want: []string{"open 1 delta"}},
				{do: frame(1, dinitial(eds, reviews)), want: []string{"req 1 eds initial"}},
				{at: 10 * ms, do: frame(1, dpush(eds, 1, nil, endpoint(reviews, "10.0.0.1"))), want: []string{
					"push 1 eds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, dpush(eds, 2, nil, endpoint(reviews, "10.0.0.9"))), want: []string{
					"ended 1 eds v=1 superseded 10ms",
					"push 1 eds v=2 res=1 +0 -0 ~1 =0 " + plus("~", reviews) + " full",
				}},
				{at: 30 * ms, do: frame(1, dsub(eds, 1, []string{ratings}, nil)), want: []string{"req 1 eds stale +sub"}},
				{at: 40 * ms, do: frame(1, dack(eds, 2)), want: []string{"req 1 eds ack", "ended 1 eds v=2 ack 20ms"},
					check: wantType(1, eds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(2), LastSentNonce: nonce(2),
						LastAckedVersion: ver(2), LastAckedNonce: nonce(2),
						Pushes: 2, ACKs: 1, StaleNonces: 1, FullSyncs: 2, Subscribed: []string{ratings, reviews}, Resources: 1,
					})},
			},
		},
		{
			name: "istiod's LDS: the whole set plus removed_resources is a full sync",
			steps: []step{
				{do: open(1, adsDelta), want: []string{"open 1 delta"}},
				{do: frame(1, dinitial(lds)), want: []string{"req 1 lds initial"}},
				{at: 10 * ms, do: frame(1, dpush(lds, 1, nil, listener("0.0.0.0_9080"), listener("virtualInbound"))), want: []string{
					"push 1 lds v=1 res=2 +2 -0 ~0 =0 +[0.0.0.0_9080 virtualInbound] full initial",
				}},
				{at: 20 * ms, do: frame(1, dack(lds, 1)), want: []string{"req 1 lds ack", "ended 1 lds v=1 ack 10ms"}},
				{at: 2 * time.Second, do: frame(1, dpush(lds, 2, []string{"0.0.0.0_9080"}, listener("0.0.0.0_8080"), listener("virtualInbound"))), want: []string{
					"fullsync 1 20ms at=20ms [lds]",
					"push 1 lds v=2 res=2 +1 -1 ~0 =1 +[0.0.0.0_8080] -[0.0.0.0_9080] full",
				}},
				{at: 2010 * ms, do: frame(1, dack(lds, 2)), want: []string{"req 1 lds ack", "ended 1 lds v=2 ack 10ms"}},
				// Not everything: virtualInbound is neither sent nor removed.
				{at: 3 * time.Second, do: frame(1, dpush(lds, 3, nil, listener("0.0.0.0_8080"))), want: []string{
					"push 1 lds v=3 res=1 +0 -0 ~0 =1 redundant",
				}},
				{at: 3010 * ms, do: frame(1, dnack(lds, 3, "Error adding/updating listener(s) 0.0.0.0_8080: duplicate")), want: []string{
					"req 1 lds nack",
					`ended 1 lds v=3 nack 10ms code=3 "Error adding/updating listener(s) 0.0.0.0_8080: duplicate" names=[0.0.0.0_8080]`,
				}, check: wantType(1, lds, track.TypeState{
					State: "NACKED", LastSentVersion: ver(3), LastSentNonce: nonce(3),
					LastAckedVersion: ver(2), LastAckedNonce: nonce(2),
					Pushes: 3, LastError: "Error adding/updating listener(s) 0.0.0.0_8080: duplicate",
					ACKs: 2, NACKs: 1, RedundantPushes: 1, FullSyncs: 2, Subscribed: []string{"*"}, Resources: 2,
				})},
			},
		},
	})
}
