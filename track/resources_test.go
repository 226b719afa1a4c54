package track_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/google/go-cmp/cmp"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// resStep is one frame (or tick) and what the stream's client then holds,
// resource by resource, with the resource events it raised.
type resStep struct {
	at     time.Duration
	do     action
	events []string // ResourceNotSent and ResourceNotSentEnded only
	want   []string // every resource of stream 1 (resourceLine); nil: not checked
}

func resourceLine(r track.ResourceStatus) string {
	s := fmt.Sprintf("%s %s %s", codec.ShortType(r.TypeURL), r.Name, r.Status)
	if r.Version != "" {
		s += " v=" + short(r.Version)
	}
	if r.ErrorDetails != "" {
		s += fmt.Sprintf(" err=%s:%q", short(r.ErrorVersion), r.ErrorDetails)
	}
	if r.NotSent {
		s += " not-sent"
	}
	return s
}

func resourceEvents(evs []track.Event) []string {
	var out []string
	for _, e := range evs {
		switch e := e.(type) {
		case track.ResourceNotSent:
			out = append(out, fmt.Sprintf("not-sent %s %s since=%v removed=%v", codec.ShortType(e.TypeURL), e.Name, e.Since.Sub(t0), e.Removed))
		case track.ResourceNotSentEnded:
			out = append(out, fmt.Sprintf("not-sent-ended %s %s arrived=%v", codec.ShortType(e.TypeURL), e.Name, e.Arrived))
		}
	}
	return out
}

func playResources(t *testing.T, tr *track.Tracker, steps []resStep) {
	t.Helper()
	for i, st := range steps {
		evs := st.do(t, tr, t0.Add(st.at))
		if diff := cmp.Diff(st.events, resourceEvents(evs)); diff != "" {
			t.Fatalf("step %d (at %v): resource events (-want +got):\n%s", i, st.at, diff)
		}
		if st.want == nil {
			continue
		}
		got := []string{}
		for _, c := range tr.ClientResources(nil, true) {
			if c.StreamID != 1 {
				continue
			}
			for _, r := range c.Resources {
				got = append(got, resourceLine(r))
			}
		}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("step %d (at %v): resources (-want +got):\n%s", i, st.at, diff)
		}
	}
}

func resConfig() track.Config {
	return track.Config{Resources: true, InitialFetchTimeout: 15 * time.Second}
}

// grpcNACK is the message gRPC's xDS client NACKs with: each rejected
// resource by name, with why.
func grpcNACK(typeURL string, n, accepted int, subscribed, names []string) *discoveryv3.DiscoveryRequest {
	msg := `error parsing "ClusterResource" response: `
	for i, name := range names {
		if i > 0 {
			msg += ";\n"
		}
		msg += fmt.Sprintf("resource %q: unexpected lbPolicy MAGLEV in response", name)
	}
	return nack(typeURL, n, accepted, msg, subscribed...)
}

func TestResourcesSotW(t *testing.T) {
	leakcheck.Check(t)
	const a, b, x = "cluster-a", "cluster-b", "cluster-x"
	withError := func(p *discoveryv3.DiscoveryResponse, name, msg string) *discoveryv3.DiscoveryResponse {
		p.ResourceErrors = append(p.ResourceErrors, &discoveryv3.ResourceError{
			ResourceName: &discoveryv3.ResourceName{Name: name}, ErrorDetail: &statuspb.Status{Code: 5, Message: msg}})
		return p
	}
	tests := []struct {
		name  string
		steps []resStep
	}{
		{
			name: "named CDS as gRPC asks: requested, acked, one NACKed, fixed, one never sent, one removed",
			steps: []resStep{
				{do: open(1, adsSotW)},
				{do: frame(1, withNode(initial(cds, a, b), sidecar)), want: []string{"cds cluster-a REQUESTED", "cds cluster-b REQUESTED"}},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(a), cluster(b))), want: []string{"cds cluster-a REQUESTED", "cds cluster-b REQUESTED"}},
				{at: 20 * ms, do: frame(1, ack(cds, 1, a, b)), want: []string{"cds cluster-a ACKED v=1", "cds cluster-b ACKED v=1"}},
				{at: 30 * ms, do: frame(1, push(cds, 2, clusterV2(a), clusterV2(b)))},
				{at: 40 * ms, do: frame(1, grpcNACK(cds, 2, 1, []string{a, b}, []string{b})), want: []string{
					"cds cluster-a ACKED v=2",
					`cds cluster-b NACKED v=1 err=2:"unexpected lbPolicy MAGLEV in response"`,
				}},
				{at: 50 * ms, do: frame(1, push(cds, 3, cluster(a), cluster(b)))},
				{at: 60 * ms, do: frame(1, ack(cds, 3, a, b)), want: []string{"cds cluster-a ACKED v=3", "cds cluster-b ACKED v=3"}},
				{at: 70 * ms, do: frame(1, ack(cds, 3, a, b, x)), want: []string{"cds cluster-a ACKED v=3", "cds cluster-b ACKED v=3", "cds cluster-x REQUESTED"}},
				{at: 14 * time.Second, do: tick(), want: []string{"cds cluster-a ACKED v=3", "cds cluster-b ACKED v=3", "cds cluster-x REQUESTED"}},
				{at: 16 * time.Second, do: tick(), events: []string{"not-sent cds cluster-x since=70ms removed=false"},
					want: []string{"cds cluster-a ACKED v=3", "cds cluster-b ACKED v=3", "cds cluster-x DOES_NOT_EXIST not-sent"}},
				// A whole-type response without b: b is gone while asked for.
				{at: 17 * time.Second, do: frame(1, push(cds, 4, cluster(a)))},
				{at: 17*time.Second + 10*ms, do: frame(1, ack(cds, 4, a, b, x)), events: []string{"not-sent cds cluster-b since=17s removed=true"},
					want: []string{"cds cluster-a ACKED v=4", "cds cluster-b DOES_NOT_EXIST not-sent", "cds cluster-x DOES_NOT_EXIST not-sent"}},
				// x arrives at last; b is no longer asked for.
				{at: 18 * time.Second, do: frame(1, push(cds, 5, cluster(a), cluster(x)))},
				{at: 18*time.Second + 10*ms, do: frame(1, ack(cds, 5, a, x)),
					events: []string{"not-sent-ended cds cluster-b arrived=false", "not-sent-ended cds cluster-x arrived=true"},
					want:   []string{"cds cluster-a ACKED v=5", "cds cluster-x ACKED v=5"}},
			},
		},
		{
			name: "Envoy's wildcard CDS: what arrives is tracked, what leaves is dropped, a message naming a cluster NACKs it alone",
			steps: []resStep{
				{do: open(1, adsSotW)},
				{do: frame(1, withNode(initial(cds), sidecar))},
				{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews), cluster(ratings)))},
				{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"cds " + ratings + " ACKED v=1", "cds " + reviews + " ACKED v=1"}},
				{at: 30 * ms, do: frame(1, push(cds, 2, clusterV2(reviews)))},
				// Envoy applies what it can of a rejected update, removals included.
				{at: 40 * ms, do: frame(1, nack(cds, 2, 1, "Error adding/updating cluster(s) "+reviews+": bad")), want: []string{
					"cds " + reviews + ` NACKED v=1 err=2:"Error adding/updating cluster(s) ` + reviews + `: bad"`,
				}},
				{at: 50 * ms, do: frame(1, push(cds, 3, cluster(reviews)))},
				{at: 60 * ms, do: frame(1, ack(cds, 3)), want: []string{"cds " + reviews + " ACKED v=3"}},
			},
		},
		{
			name: "a NACK that names nothing rejects the whole push",
			steps: []resStep{
				{do: open(1, adsSotW)},
				{do: frame(1, withNode(initial(eds, reviews), sidecar)), want: []string{"eds " + reviews + " REQUESTED"}},
				{at: 10 * ms, do: frame(1, push(eds, 1, endpoint(reviews, "10.0.0.1")))},
				{at: 20 * ms, do: frame(1, nack(eds, 1, 0, "malformed", reviews)), want: []string{"eds " + reviews + ` NACKED err=1:"malformed"`}},
			},
		},
		{
			name: "the control plane's own error for a resource",
			steps: []resStep{
				{do: open(1, adsSotW)},
				{do: frame(1, withNode(initial(cds, a, b), sidecar))},
				{at: 10 * ms, do: frame(1, withError(push(cds, 1, cluster(a)), b, "no such service"))},
				{at: 20 * ms, do: frame(1, ack(cds, 1, a, b)), want: []string{"cds cluster-a ACKED v=1", `cds cluster-b RECEIVED_ERROR err=1:"no such service"`}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { playResources(t, track.New(resConfig()), tt.steps) })
	}
}

func TestResourcesDelta(t *testing.T) {
	leakcheck.Check(t)
	dpushV := func(n int, removed []string, versions map[string]string, resources ...proto.Message) *discoveryv3.DeltaDiscoveryResponse {
		p := dpush(eds, n, removed, resources...)
		for _, r := range p.Resources {
			if v, ok := versions[r.Name]; ok {
				r.Version = v
			}
		}
		return p
	}
	reconnect := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: eds, ResourceNamesSubscribe: []string{reviews, ratings},
		InitialResourceVersions: map[string]string{reviews: "r7"}, Node: envoyNode(sidecar)}
	tests := []struct {
		name  string
		steps []resStep
	}{
		{
			name: "subscribe, per-resource versions, removal of a subscribed name, unsubscribe",
			steps: []resStep{
				{do: open(1, adsDelta)},
				{do: frame(1, dinitialNode(eds, sidecar, reviews, ratings)), want: []string{"eds " + ratings + " REQUESTED", "eds " + reviews + " REQUESTED"}},
				{at: 10 * ms, do: frame(1, dpushV(1, nil, map[string]string{reviews: "r1"}, endpoint(reviews, "10.0.0.1"))), want: []string{
					"eds " + ratings + " REQUESTED", "eds " + reviews + " REQUESTED"}},
				{at: 20 * ms, do: frame(1, dack(eds, 1)), want: []string{"eds " + ratings + " REQUESTED", "eds " + reviews + " ACKED v=r1"}},
				{at: 30 * ms, do: frame(1, dsub(eds, 0, []string{details}, nil)), want: []string{
					"eds " + details + " REQUESTED", "eds " + ratings + " REQUESTED", "eds " + reviews + " ACKED v=r1"}},
				// removed_resources of a name still asked for: DOES_NOT_EXIST at once.
				{at: 40 * ms, do: frame(1, dpushV(2, []string{reviews}, nil, endpoint(ratings, "10.0.0.2")))},
				{at: 50 * ms, do: frame(1, dack(eds, 2)), events: []string{"not-sent eds " + reviews + " since=40ms removed=true"},
					want: []string{"eds " + details + " REQUESTED", "eds " + ratings + " ACKED v=2", "eds " + reviews + " DOES_NOT_EXIST not-sent"}},
				{at: 60 * ms, do: frame(1, dsub(eds, 0, nil, []string{reviews, details})), events: []string{"not-sent-ended eds " + reviews + " arrived=false"},
					want: []string{"eds " + ratings + " ACKED v=2"}},
				{at: 70 * ms, do: frame(1, dsub(eds, 0, nil, []string{ratings})), want: []string{}},
			},
		},
		{
			name: "a reconnect says what the client holds",
			steps: []resStep{
				{do: open(1, adsDelta)},
				{do: frame(1, reconnect), want: []string{"eds " + ratings + " REQUESTED", "eds " + reviews + " ACKED v=r7"}},
			},
		},
		{
			name: "a wildcard Delta type keeps what arrives until removed",
			steps: []resStep{
				{do: open(1, adsDelta)},
				{do: frame(1, dinitialNode(cds, sidecar))},
				{at: 10 * ms, do: frame(1, dpush(cds, 1, nil, cluster(reviews), cluster(ratings)))},
				{at: 20 * ms, do: frame(1, dack(cds, 1)), want: []string{"cds " + ratings + " ACKED v=1", "cds " + reviews + " ACKED v=1"}},
				{at: 30 * ms, do: frame(1, dpush(cds, 2, []string{ratings}))},
				{at: 40 * ms, do: frame(1, dack(cds, 2)), want: []string{"cds " + reviews + " ACKED v=1"}},
			},
		},
		{
			name: "a superseded push counts as applied",
			steps: []resStep{
				{do: open(1, adsDelta)},
				{do: frame(1, dinitialNode(eds, sidecar, reviews))},
				{at: 10 * ms, do: frame(1, dpush(eds, 1, nil, endpoint(reviews, "10.0.0.1")))},
				{at: 20 * ms, do: frame(1, dpush(eds, 2, nil, endpoint(ratings, "10.0.0.1"))), want: []string{"eds " + reviews + " ACKED v=1"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { playResources(t, track.New(resConfig()), tt.steps) })
	}
}

// Without Config.Resources nothing is kept resource by resource.
func TestResourcesOff(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	playResources(t, tr, []resStep{
		{do: open(1, adsSotW)},
		{do: frame(1, withNode(initial(cds, "a"), sidecar)), want: []string{}},
	})
}
