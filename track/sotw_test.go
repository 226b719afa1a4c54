package track_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	"google.golang.org/protobuf/proto"
)

// clusterNACK is how Envoy words a rejected CDS update.
const clusterNACK = "Error adding/updating cluster(s) " + ratings +
	": Proto constraint validation failed (ClusterValidationError.ConnectTimeout: value must be greater than 0s)"

func TestSotW(t *testing.T) {
	leakcheck.Check(t)
	runScenarios(t, []scenario{
		{
			name: "initial request, push, ACK",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, withNode(initial(cds), sidecar)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 42, cluster(reviews), cluster(ratings))), want: []string{
					"push 1 cds v=42 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 60 * ms, do: frame(1, ack(cds, 42)), want: []string{"req 1 cds ack", "ended 1 cds v=42 ack 50ms"}},
			},
		},
		{
			name: "a NACK carries the last accepted version and is a NACK all the same",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, withNode(initial(cds), sidecar)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 41, cluster(reviews), cluster(ratings))), want: []string{
					"push 1 cds v=41 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 30 * ms, do: frame(1, ack(cds, 41)), want: []string{"req 1 cds ack", "ended 1 cds v=41 ack 20ms"}},
				{at: time.Second, do: frame(1, push(cds, 42, cluster(reviews), clusterV2(ratings))), want: []string{
					"push 1 cds v=42 res=2 +0 -0 ~1 =1 " + plus("~", ratings) + " full",
				}},
				{at: 1100 * ms, do: frame(1, nack(cds, 42, 41, clusterNACK)), want: []string{
					"fullsync 1 30ms at=30ms [cds]", // settled: no type requested within a second
					"req 1 cds nack",
					fmt.Sprintf("ended 1 cds v=42 nack 100ms code=3 %q names=[%s]", clusterNACK, ratings),
				}, check: wantType(1, cds, track.TypeState{
					State: "NACKED", LastSentVersion: ver(42), LastSentNonce: nonce(42),
					LastAckedVersion: ver(41), LastAckedNonce: nonce(41), LastError: clusterNACK,
					Pushes: 2, ACKs: 1, NACKs: 1, FullSyncs: 2, Subscribed: []string{"*"}, Resources: 2,
				})},
				// The rejected content never became the client's: going back
				// to what it accepted changes nothing.
				// Each push of CDS under a new version, unasked, is a full
				// push: the second within a minute raises the alarm.
				{at: 2 * time.Second, do: frame(1, push(cds, 43, cluster(reviews), cluster(ratings))), want: []string{
					"push 1 cds v=43 res=2 +0 -0 ~0 =2 full redundant",
					`start repeated_full_sync "node ` + sidecar + `" count=2`,
				}},
				{at: 2010 * ms, do: frame(1, ack(cds, 43)), want: []string{"req 1 cds ack", "ended 1 cds v=43 ack 10ms"},
					check: wantType(1, cds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(43), LastSentNonce: nonce(43),
						LastAckedVersion: ver(43), LastAckedNonce: nonce(43),
						Pushes: 3, ACKs: 2, NACKs: 1, RedundantPushes: 1, FullSyncs: 3, Subscribed: []string{"*"}, Resources: 2,
					})},
				// A NACK that (oddly) reports the rejected version is still a NACK.
				{at: 3 * time.Second, do: frame(1, push(cds, 44, cluster(reviews), clusterV2(ratings))), want: []string{
					"push 1 cds v=44 res=2 +0 -0 ~1 =1 " + plus("~", ratings) + " full",
				}},
				{at: 3010 * ms, do: frame(1, nack(cds, 44, 44, "rejected")), want: []string{
					"req 1 cds nack", `ended 1 cds v=44 nack 10ms code=3 "rejected" names=[]`,
				}},
			},
		},
		{
			name: "stale nonce and superseded push",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				// The client handles pushes in order, so the second is
				// compared with a state that includes the first.
				{at: 20 * ms, do: frame(1, push(cds, 2, cluster(reviews), cluster(ratings))), want: []string{
					"ended 1 cds v=1 superseded 10ms",
					"push 1 cds v=2 res=2 +1 -0 ~0 =1 " + plus("+", ratings) + " full",
				}},
				{at: 30 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds stale"}},
				{at: 40 * ms, do: frame(1, ack(cds, 2)), want: []string{"req 1 cds ack", "ended 1 cds v=2 ack 20ms"}},
				{at: 50 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds stale"}},
				// Repeating the latest nonce answers nothing a second time.
				{at: 60 * ms, do: frame(1, ack(cds, 2)), want: []string{"req 1 cds ack"},
					check: wantType(1, cds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(2), LastSentNonce: nonce(2),
						LastAckedVersion: ver(2), LastAckedNonce: nonce(2),
						Pushes: 2, ACKs: 1, StaleNonces: 2, FullSyncs: 2, Subscribed: []string{"*"}, Resources: 2,
					})},
			},
		},
		{
			name: "EDS: a name requested twice is subscribed once",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(eds, reviews, reviews)), want: []string{"req 1 eds initial"},
					check: func(t *testing.T, tr *track.Tracker) {
						if got, want := typeState(t, tr, 1, eds).Subscribed, []string{reviews}; !slices.Equal(got, want) {
							t.Errorf("subscribed = %q, want %q", got, want)
						}
					}},
				{at: time.Second, do: frame(1, initial(eds, ratings, reviews, ratings, reviews)), want: []string{"req 1 eds initial +sub"},
					check: func(t *testing.T, tr *track.Tracker) {
						if got, want := typeState(t, tr, 1, eds).Subscribed, []string{ratings, reviews}; !slices.Equal(got, want) {
							t.Errorf("subscribed = %q, want %q", got, want)
						}
					}},
			},
		},
		{
			name: "EDS: a name missing from a push is kept; empty names unsubscribe",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(eds, reviews, ratings)), want: []string{"req 1 eds initial"}},
				{at: 10 * ms, do: frame(1, push(eds, 1, endpoint(reviews, "10.0.0.1"), endpoint(ratings, "10.0.0.2"))), want: []string{
					"push 1 eds v=1 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, ack(eds, 1, reviews, ratings)), want: []string{"req 1 eds ack", "ended 1 eds v=1 ack 10ms"}},
				{at: time.Second, do: frame(1, push(eds, 2, endpoint(reviews, "10.0.0.9"))), want: []string{
					"push 1 eds v=2 res=1 +0 -0 ~1 =0 " + plus("~", reviews),
				}},
				{at: 1010 * ms, do: frame(1, ack(eds, 2, reviews, ratings)), want: []string{"req 1 eds ack", "ended 1 eds v=2 ack 10ms"},
					check: wantType(1, eds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(2), LastSentNonce: nonce(2),
						LastAckedVersion: ver(2), LastAckedNonce: nonce(2),
						Pushes: 2, ACKs: 2, FullSyncs: 1, Subscribed: []string{ratings, reviews}, Resources: 2,
					})},
				// Envoy re-requests EDS with the latest nonce when its clusters change.
				{at: 2 * time.Second, do: frame(1, ack(eds, 2, reviews)), want: []string{"fullsync 1 20ms at=20ms [eds]", "req 1 eds ack +sub"},
					check: func(t *testing.T, tr *track.Tracker) {
						if got := typeState(t, tr, 1, eds).Resources; got != 1 {
							t.Errorf("resources after dropping a name = %d, want 1", got)
						}
					}},
				{at: 3 * time.Second, do: frame(1, ack(eds, 2)), want: []string{"req 1 eds unsubscribe +sub"},
					check: wantType(1, eds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(2), LastSentNonce: nonce(2),
						LastAckedVersion: ver(2), LastAckedNonce: nonce(2),
						Pushes: 2, ACKs: 2, FullSyncs: 1, Subscribed: []string{}, Resources: 0,
					})},
				{at: 4 * time.Second, do: frame(1, ack(eds, 2)), want: []string{"req 1 eds ack"}},
				// LDS and CDS: empty names are the wildcard, never an unsubscribe.
				{at: 5 * time.Second, do: frame(1, initial(lds, "0.0.0.0_9080")), want: []string{"req 1 lds initial"}},
				{at: 6 * time.Second, do: frame(1, initial(lds)), want: []string{"req 1 lds initial +sub"},
					check: func(t *testing.T, tr *track.Tracker) {
						if got := typeState(t, tr, 1, lds).Subscribed; len(got) != 1 || got[0] != "*" {
							t.Errorf("LDS subscribed = %q, want [*]", got)
						}
					}},
			},
		},
		{
			name: "LDS and CDS: a name missing from a push is removed",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews), cluster(ratings), cluster(details))), want: []string{
					"push 1 cds v=1 res=3 +3 -0 ~0 =0 " + plus("+", reviews, ratings, details) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				{at: time.Second, do: frame(1, push(cds, 2, cluster(reviews), clusterV2(ratings))), want: []string{
					"push 1 cds v=2 res=2 +0 -1 ~1 =1 " + plus("-", details) + " " + plus("~", ratings) + " full",
				}},
				{at: 1010 * ms, do: frame(1, ack(cds, 2)), want: []string{"req 1 cds ack", "ended 1 cds v=2 ack 10ms"}},
				{at: 1020 * ms, do: frame(1, initial(lds)), want: []string{"fullsync 1 20ms at=20ms [cds]", "req 1 lds initial"}},
				{at: 1030 * ms, do: frame(1, push(lds, 3, listener("virtualOutbound"), listener("virtualInbound"))), want: []string{
					"push 1 lds v=3 res=2 +2 -0 ~0 =0 +[virtualOutbound virtualInbound] full initial",
				}},
				{at: 1040 * ms, do: frame(1, ack(lds, 3)), want: []string{"req 1 lds ack", "ended 1 lds v=3 ack 10ms"}},
				// An empty push removes everything, and is no full sync.
				{at: 2 * time.Second, do: frame(1, push(lds, 4)), want: []string{
					"push 1 lds v=4 res=0 +0 -2 ~0 =0 -[virtualInbound virtualOutbound]",
				}},
				{at: 2010 * ms, do: frame(1, ack(lds, 4)), want: []string{"req 1 lds ack", "ended 1 lds v=4 ack 10ms"},
					check: func(t *testing.T, tr *track.Tracker) {
						if got := typeState(t, tr, 1, cds).Resources; got != 2 {
							t.Errorf("CDS resources = %d, want 2", got)
						}
						if got := typeState(t, tr, 1, lds).Resources; got != 0 {
							t.Errorf("LDS resources = %d, want 0", got)
						}
					}},
			},
		},
		{
			name: "redundant pushes, whatever their order",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews), cluster(ratings))), want: []string{
					"push 1 cds v=1 res=2 +2 -0 ~0 =0 " + plus("+", reviews, ratings) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				{at: time.Second, do: frame(1, push(cds, 2, cluster(reviews), cluster(ratings))), want: []string{
					"push 1 cds v=2 res=2 +0 -0 ~0 =2 full redundant",
				}},
				{at: 1010 * ms, do: frame(1, ack(cds, 2)), want: []string{"req 1 cds ack", "ended 1 cds v=2 ack 10ms"}},
				{at: 2 * time.Second, do: frame(1, push(cds, 3, cluster(ratings), cluster(reviews))), want: []string{
					"fullsync 1 20ms at=20ms [cds]",
					"push 1 cds v=3 res=2 +0 -0 ~0 =2 full redundant",
				}},
			},
		},
		{
			name: "push timeout, then a late ACK",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 30 * time.Second, do: tick()},
				{at: 30*time.Second + 10*ms, do: tick(), want: []string{"ended 1 cds v=1 timeout 30s"},
					check: wantType(1, cds, track.TypeState{
						State: "STALE", LastSentVersion: ver(1), LastSentNonce: nonce(1),
						Pushes: 1, FullSyncs: 1, Subscribed: []string{"*"},
					})},
				{at: 31 * time.Second, do: tick()},
				{at: 40 * time.Second, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "late 1 cds v=1 ack 39.99s"},
					check: wantType(1, cds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(1), LastSentNonce: nonce(1),
						LastAckedVersion: ver(1), LastAckedNonce: nonce(1),
						Pushes: 1, ACKs: 1, FullSyncs: 1, Subscribed: []string{"*"}, Resources: 1,
					})},
				// The late ACK completed the full sync.
				{at: 41 * time.Second, do: tick(), want: []string{"fullsync 1 40s at=40s [cds]"}},
			},
		},
		{
			name: "closing a stream ends its open pushes",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, withNode(initial(cds), sidecar)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, initial(eds, reviews)), want: []string{"req 1 eds initial"}},
				{at: 30 * ms, do: frame(1, push(eds, 2, endpoint(reviews, "10.0.0.1"))), want: []string{
					"push 1 eds v=2 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 5 * time.Second, do: closeStream(1, 14, "upstream connect error"), want: []string{
					"ended 1 cds v=1 closed 4.99s",
					"ended 1 eds v=2 closed 4.97s",
					`close 1 code=14 "upstream connect error" node="` + sidecar + `"`,
				}, check: func(t *testing.T, tr *track.Tracker) {
					if got := tr.Streams(""); len(got) != 0 {
						t.Errorf("Streams after close = %+v, want none", got)
					}
				}},
				{at: 6 * time.Second, do: frame(1, ack(cds, 1))},
				{at: 6 * time.Second, do: closeStream(1, 0, "")},
			},
		},
		{
			name: "opaque streams are relayed, not tracked",
			steps: []step{
				{do: open(1, "/istio.v1.auth.IstioCertificateService/CreateCertificate"), want: []string{"open 1 opaque"}},
				{do: frame(1, initial(cds))},
				{do: frame(1, push(cds, 1, cluster(reviews)))},
				{at: time.Second, do: tick()},
				{at: time.Second, do: closeStream(1, 0, ""), want: []string{`close 1 code=0 "" node=""`}},
			},
		},
	})
}

// A NACK's ErrorNames are the pushed names its message mentions, capped.
func TestNACKErrorNames(t *testing.T) {
	leakcheck.Check(t)
	var clusters []string
	for i := range 30 {
		clusters = append(clusters, fmt.Sprintf("outbound|%d||svc-%02d.default.svc.cluster.local", 8000+i, i))
	}
	tr := track.New(track.Config{MaxNames: 3})
	tr.OpenStream(track.StreamMeta{ID: 1, Method: adsSotW, OpenedAt: t0})
	frame(1, initial(cds))(t, tr, t0)
	var res []proto.Message
	for _, c := range clusters {
		res = append(res, cluster(c))
	}
	frame(1, push(cds, 1, res...))(t, tr, t0)
	msg := "Error adding/updating cluster(s) " + clusters[4] + ", " + clusters[7] + ", " + clusters[9] + ", " + clusters[12] + ": bad"
	evs := frame(1, nack(cds, 1, 0, msg))(t, tr, t0.Add(ms))
	var got []string
	for _, e := range evs {
		if e, ok := e.(track.PushEnded); ok {
			got = e.ErrorNames
			if e.Push.Diff.Added != 30 || len(e.Push.Diff.AddedNames) != 3 {
				t.Errorf("diff = %d added, names %q; want 30 added, 3 names", e.Push.Diff.Added, e.Push.Diff.AddedNames)
			}
		}
	}
	want := []string{clusters[4], clusters[7], clusters[9]}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ErrorNames = %q, want %q", got, want)
	}
}
