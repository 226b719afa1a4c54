package track_test

import (
	"testing"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// TestObservationGaps: when frames of a stream were relayed but not
// observed, the client may answer a push the tracker never saw. Until the
// type's next observed push, a nonce the tracker does not know is reported
// as unobserved, not stale, and the last acknowledged state is no longer
// trusted to call a push redundant.
func TestObservationGaps(t *testing.T) {
	leakcheck.Check(t)
	runScenarios(t, []scenario{
		{
			name: "the answer to an unobserved push is not a stale nonce",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: frame(1, initial(cds)), want: []string{"req 1 cds initial"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
					"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
				}},
				{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
				// Push 2 and its ACK went by unobserved.
				{at: 30 * ms, do: gap(1, 2), want: []string{"gap 1 skipped=2"}},
				{at: 40 * ms, do: frame(1, ack(cds, 2)), want: []string{"req 1 cds unobserved"}},
				{at: 45 * ms, do: frame(1, nack(cds, 3, 2, "rejected")), want: []string{"req 1 cds unobserved"}},
				// Push 4 is seen: its content is what the tracker last knew
				// acknowledged, but the client may hold push 2's since.
				{at: 50 * ms, do: frame(1, push(cds, 4, cluster(reviews))), want: []string{
					"push 1 cds v=4 res=1 +0 -0 ~0 =1 full",
				}},
				// From here a nonce the tracker does not know is stale again.
				{at: 60 * ms, do: frame(1, ack(cds, 3)), want: []string{"req 1 cds stale"}},
				{at: 70 * ms, do: frame(1, ack(cds, 4)), want: []string{"req 1 cds ack", "ended 1 cds v=4 ack 20ms"},
					check: wantType(1, cds, track.TypeState{
						State: "SYNCED", LastSentVersion: ver(4), LastSentNonce: nonce(4),
						LastAckedVersion: ver(4), LastAckedNonce: nonce(4),
						Pushes: 2, ACKs: 2, StaleNonces: 1, FullSyncs: 2, Subscribed: []string{"*"}, Resources: 1,
					})},
			},
		},
		{
			name: "a type first seen after the gap starts unsure",
			steps: []step{
				{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
				{do: gap(1, 3), want: []string{"gap 1 skipped=3"}},
				{at: 10 * ms, do: frame(1, ack(cds, 7)), want: []string{"req 1 cds unobserved"}},
			},
		},
		{
			name: "a gap on a stream the tracker does not know",
			steps: []step{
				{do: gap(9, 1), want: []string{"gap 9 skipped=1"}},
			},
		},
	})
}
