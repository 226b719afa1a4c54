package track

import (
	"fmt"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/adstap/adstap/codec"
)

// An idle type keeps only what its latest push left past the ACK (its
// nonce, version, time and standing); the push itself goes back to the
// pool, except a large push's, whose slice the next push reuses, and a
// NACKed one's, which the next push of the same content compares with.
func TestAnIdleTypeLetsGoOfItsPush(t *testing.T) {
	push := func(version string, n int) *codec.Response {
		resp := &codec.Response{TypeURL: codec.TypeCluster, VersionInfo: version, Nonce: "nonce-" + version}
		for i := range n {
			name := fmt.Sprintf("cluster-%d", i)
			resp.Resources = append(resp.Resources, codec.Resource{Name: []byte(name), Hash: xxhash.Sum64String(name)})
		}
		return resp
	}
	answer := func(resp *codec.Response, nack bool) *codec.Request {
		req := &codec.Request{TypeURL: resp.TypeURL, VersionInfo: resp.VersionInfo, ResponseNonce: resp.Nonce}
		if nack {
			req.ErrorDetail = &codec.ErrorDetail{Message: "rejected cluster-0"}
		}
		return req
	}
	tests := []struct {
		name      string
		resources int
		nack      bool
		wantKept  bool
		wantState State
	}{
		{name: "ACKed", resources: 3, wantState: StateSynced},
		{name: "ACKed, larger than the pool's slices", resources: keptPushRes + 1, wantKept: true, wantState: StateSynced},
		{name: "NACKed", resources: 3, nack: true, wantKept: true, wantState: StateNACKed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{}.withDefaults()
			s := newStream(StreamMeta{ID: 1, Method: "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"}, &keeper{})
			s.sc.borrow()
			defer s.sc.giveBack()
			ts := s.typeFor(codec.TypeCluster)
			at := time.Unix(100, 0)
			for i, version := range []string{"v1", "v2"} {
				resp := push(version, tt.resources)
				ts.send(s, at, resp, 0, &cfg, nil)
				if ts.p == nil || !ts.sent.pending() {
					t.Fatalf("push %d: in flight %v, pending %v; want a push in flight", i+1, ts.p != nil, ts.sent.pending())
				}
				req := answer(resp, tt.nack)
				if c := ts.classify(req, s.sc); c.kind != KindACK && c.kind != KindNACK || !c.answers {
					t.Fatalf("push %d: its answer classified %s (answers %v)", i+1, c.kind, c.answers)
				}
				ts.answer(s, at, req, cfg.MaxNames, nil)
				if got := ts.p != nil; got != tt.wantKept {
					t.Errorf("push %d answered: push kept %v, want %v", i+1, got, tt.wantKept)
				}
				st := ts.state(cfg.MaxNames)
				got := [4]string{string(st.State), st.LastSentVersion, st.LastSentNonce, st.LastSentAt.String()}
				want := [4]string{string(tt.wantState), version, resp.Nonce, at.String()}
				if got != want {
					t.Errorf("push %d answered: state %q, want %q", i+1, got, want)
				}
				// The answer again is no longer an answer, and is told from a
				// stale nonce by the nonce the type keeps.
				if c := ts.classify(answer(resp, tt.nack), s.sc); c.answers || c.kind == KindStale {
					t.Errorf("push %d answered: its answer again classified %s (answers %v)", i+1, c.kind, c.answers)
				}
				at = at.Add(time.Second)
			}
		})
	}
}
