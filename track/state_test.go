package track_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
	"github.com/google/go-cmp/cmp"
)

// twoNodes is a tracker with a synced Envoy stream of node sidecar and a
// fresh stream of another node.
func twoNodes(t *testing.T) *track.Tracker {
	tr := track.New(track.Config{})
	run(t, tr, []step{
		{do: open(1, adsSotW), want: []string{"open 1 sotw"}},
		{do: frame(1, withNode(initial(cds), sidecar)), want: []string{"req 1 cds initial"}},
		{at: 10 * ms, do: frame(1, push(cds, 1, cluster(reviews))), want: []string{
			"push 1 cds v=1 res=1 +1 -0 ~0 =0 " + plus("+", reviews) + " full initial",
		}},
		{at: 20 * ms, do: frame(1, ack(cds, 1)), want: []string{"req 1 cds ack", "ended 1 cds v=1 ack 10ms"}},
		{at: 40 * ms, do: open(2, adsDelta), want: []string{"open 2 delta"}},
		{at: 40 * ms, do: frame(2, dinitialNode(lds, "router~10.1.9.9~ingress.istio-system~istio-system.svc.cluster.local")), want: []string{"req 2 lds initial"}},
		{at: 2 * time.Second, do: frame(1, initial(eds, names("ep-", 25)...)), want: []string{"fullsync 1 20ms at=20ms [cds]", "req 1 eds initial"}},
		{at: 2 * time.Second, do: frame(1, ack(eds, 7, names("ep-", 25)...)), want: []string{"req 1 eds stale"}},
	})
	return tr
}

func TestStreams(t *testing.T) {
	leakcheck.Check(t)
	tr := twoNodes(t)
	secs := 0.02
	want := []track.StreamState{{
		ID: 1, ConnID: 101, NodeID: sidecar, NodeCluster: "productpage.default", UserAgent: "envoy/1.36.2",
		Peer: "10.1.2.3:41000", Method: adsSotW, Protocol: codec.SotW, OpenedAt: t0, FullSyncSeconds: &secs,
		Types: map[string]*track.TypeState{
			cds: {
				State: "SYNCED", Type: "cds", LastSentVersion: ver(1), LastSentNonce: nonce(1), LastAckedVersion: ver(1), LastAckedNonce: nonce(1),
				LastSentAt: t0.Add(10 * ms), LastACKAt: t0.Add(20 * ms),
				Pushes: 1, ACKs: 1, FullSyncs: 1, Subscribed: []string{"*"}, Resources: 1,
			},
			eds: {State: "NOT_SENT", Type: "eds", StaleNonces: 1, Subscribed: append(names("ep-", 19), "+6 more")},
		},
	}}
	got := tr.Streams(sidecar)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Streams(%q) (-want +got):\n%s", sidecar, diff)
	}

	if got := tr.Streams("router~10.1.9.9~ingress.istio-system~istio-system.svc.cluster.local"); len(got) != 1 || got[0].ID != 2 {
		t.Errorf("Streams(router) = %+v, want stream 2 only", got)
	}
	if got := tr.Streams(""); len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Errorf("Streams(\"\") = %+v, want streams 1 and 2 in order", got)
	}
	if got := tr.Streams("sidecar~nobody"); got == nil || len(got) != 0 {
		t.Errorf("Streams(unknown node) = %#v, want an empty, non-nil list", got)
	}

	// A copy: changing it changes nothing in the tracker.
	got[0].Types[cds].Subscribed[0] = "changed"
	got[0].Types[cds].Pushes = 99
	if diff := cmp.Diff(want, tr.Streams(sidecar)); diff != "" {
		t.Errorf("Streams changed by its caller (-want +got):\n%s", diff)
	}
}

func TestStreamsJSON(t *testing.T) {
	leakcheck.Check(t)
	tr := twoNodes(t)
	b, err := json.Marshal(tr.Streams(""))
	if err != nil {
		t.Fatal(err)
	}
	var streams []map[string]any
	if err := json.Unmarshal(b, &streams); err != nil {
		t.Fatal(err)
	}
	if len(streams) != 2 {
		t.Fatalf("got %d streams in %s", len(streams), b)
	}
	keys := func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
	wantStream := []string{"conn_id", "full_pushes", "full_sync_seconds", "id", "method", "node_cluster", "node_id", "opened_at", "peer", "protocol", "types", "user_agent"}
	if diff := cmp.Diff(wantStream, keys(streams[0])); diff != "" {
		t.Errorf("stream keys (-want +got):\n%s", diff)
	}
	// A stream without a full sync yet shows null rather than leaving it out.
	wantDelta := []string{"conn_id", "full_pushes", "full_sync_seconds", "id", "method", "node_cluster", "node_id", "opened_at", "peer", "protocol", "types", "user_agent"}
	if diff := cmp.Diff(wantDelta, keys(streams[1])); diff != "" {
		t.Errorf("delta stream keys (-want +got):\n%s", diff)
	}
	if v := streams[1]["full_sync_seconds"]; v != nil {
		t.Errorf("full_sync_seconds = %v, want null", v)
	}
	if v := streams[0]["full_sync_seconds"]; v != 0.02 {
		t.Errorf("full_sync_seconds = %v, want 0.02", v)
	}
	if v := streams[1]["protocol"]; v != "delta" {
		t.Errorf("protocol = %v, want delta", v)
	}
	types := streams[0]["types"].(map[string]any)
	if got := keys(types); !slices.Equal(got, []string{cds, eds}) {
		t.Errorf("types keys = %q, want the type URLs", got)
	}
	wantType := []string{"acks", "full_syncs", "last_ack_at", "last_acked_nonce", "last_acked_version", "last_sent_at", "last_sent_nonce", "last_sent_version",
		"nacks", "pushes", "redundant_pushes", "resources", "stale_nonces", "state", "subscribed", "type"}
	if diff := cmp.Diff(wantType, keys(types[cds].(map[string]any))); diff != "" {
		t.Errorf("type keys (-want +got):\n%s", diff)
	}
	lds := streams[1]["types"].(map[string]any)[lds].(map[string]any)
	if got := fmt.Sprint(lds["subscribed"], " ", lds["state"]); got != "[*] NOT_SENT" {
		t.Errorf("LDS subscribed and state = %s, want [*] NOT_SENT", got)
	}
}

func TestDetectorsJSON(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{HerdThreshold: 2})
	tr.OpenStream(track.StreamMeta{ID: 1, Method: adsSotW, OpenedAt: t0})
	tr.OpenStream(track.StreamMeta{ID: 2, Method: adsSotW, OpenedAt: t0})
	rows := tr.Detectors()
	want := []track.DetectorState{
		{Detector: track.DetectorReconnectHerd, Key: "tap", Since: t0, Count: 2, Active: true},
		{Detector: track.DetectorNACKStorm},
		{Detector: track.DetectorNACKLoop},
		{Detector: track.DetectorRepeatedFullSync},
		{Detector: track.DetectorReconnectHerd, Since: t0, Count: 1},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("Detectors (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(rows[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"active", "count", "detector", "key", "node", "since", "stream_id", "type_url"}
	if diff := cmp.Diff(wantKeys, slices.Sorted(maps.Keys(m))); diff != "" {
		t.Errorf("detector keys (-want +got):\n%s", diff)
	}
}

// Streams run concurrently; the race detector checks the locking.
func TestConcurrentStreams(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	var wg sync.WaitGroup
	for id := uint64(1); id <= 8; id++ {
		wg.Go(func() {
			at := t0
			next := func() time.Time { at = at.Add(ms); return at }
			tr.OpenStream(track.StreamMeta{ID: id, Method: adsSotW, OpenedAt: at})
			frame(id, withNode(initial(cds), fmt.Sprintf("sidecar~%d", id)))(t, tr, next())
			for n := 1; n <= 50; n++ {
				tr.Response(id, next(), decodedPush(t, push(cds, n, cluster(reviews), cluster(fmt.Sprintf("c-%d", n)))), 100)
				frame(id, ack(cds, n))(t, tr, next())
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			tr.Tick(t0.Add(time.Second))
			tr.Streams("")
			tr.Detectors()
		}
	})
	wg.Wait()
	for _, s := range tr.Streams("") {
		if ts := s.Types[cds]; ts.ACKs != 50 || ts.Resources != 2 || ts.State != "SYNCED" {
			t.Errorf("stream %d: %+v, want 50 ACKs of 2 resources", s.ID, ts)
		}
	}
}

func TestStateWords(t *testing.T) {
	leakcheck.Check(t)
	tests := []struct {
		state       track.State
		wantDisplay string
	}{
		{track.StateSynced, "SYNCED"},
		{track.StateStale, "STALE"},
		{track.StateNACKed, "ERROR"},
		{track.StateNotSent, "NOT SENT"},
	}
	if len(tests) != len(track.States) {
		t.Fatalf("%d states tested, track.States has %d", len(tests), len(track.States))
	}
	for i, tt := range tests {
		if track.States[i] != tt.state {
			t.Errorf("States[%d] = %s, want %s", i, track.States[i], tt.state)
		}
		if got := tt.state.Display(); got != tt.wantDisplay {
			t.Errorf("%s.Display() = %q, want %q", tt.state, got, tt.wantDisplay)
		}
	}
}

func TestParseState(t *testing.T) {
	leakcheck.Check(t)
	// Every word adstap shows or accepts for a state, in any case; the empty
	// state means the word is refused.
	for in, want := range map[string]track.State{
		"SYNCED": track.StateSynced, "stale": track.StateStale,
		"NACKED": track.StateNACKed, "error": track.StateNACKed,
		"NOT_SENT": track.StateNotSent, "not sent": track.StateNotSent,
		"": "", "ACKED": "", "NOT-SENT": "",
	} {
		got, ok := track.ParseState(in)
		if got != want || ok != (want != "") {
			t.Errorf("ParseState(%q) = %q, %v; want %q, %v", in, got, ok, want, want != "")
		}
	}
}

// TestAwaitingSaysWhichPushWaitsForItsAnswer: the push of a type that
// awaits its answer, as whoever serves pushes (adstap replay) reads it.
func TestAwaitingSaysWhichPushWaitsForItsAnswer(t *testing.T) {
	leakcheck.Check(t)
	tr := track.New(track.Config{})
	type awaiting struct {
		Nonce string
		Since time.Duration
		OK    bool
	}
	read := func(id uint64, typeURL string) awaiting {
		n, since, ok := tr.Awaiting(id, typeURL)
		a := awaiting{Nonce: n, OK: ok}
		if ok {
			a.Since = since.Sub(t0)
		}
		return a
	}
	for i, tc := range []struct {
		at      time.Duration
		do      action
		typeURL string
		want    awaiting
	}{
		{0, open(1, adsSotW), codec.TypeCluster, awaiting{}},
		{0, frame(1, initial(codec.TypeCluster)), codec.TypeCluster, awaiting{}},
		{time.Second, frame(1, push(codec.TypeCluster, 1, cluster(reviews))), codec.TypeCluster, awaiting{nonce(1), time.Second, true}},
		{time.Second, nil, codec.TypeListener, awaiting{}},
		{2 * time.Second, frame(1, ack(codec.TypeCluster, 1)), codec.TypeCluster, awaiting{}},
		{3 * time.Second, frame(1, push(codec.TypeCluster, 2, cluster(ratings))), codec.TypeCluster, awaiting{nonce(2), 3 * time.Second, true}},
		{4 * time.Second, frame(1, nack(codec.TypeCluster, 2, 1, "rejected")), codec.TypeCluster, awaiting{}},
		{5 * time.Second, frame(1, push(codec.TypeCluster, 3, cluster(details))), codec.TypeCluster, awaiting{nonce(3), 5 * time.Second, true}},
		{6 * time.Second, closeStream(1, 0, ""), codec.TypeCluster, awaiting{}},
	} {
		if tc.do != nil {
			tc.do(t, tr, t0.Add(tc.at))
		}
		if got := read(1, tc.typeURL); got != tc.want {
			t.Errorf("step %d: Awaiting = %+v, want %+v", i, got, tc.want)
		}
	}
	if got := read(9, codec.TypeCluster); got != (awaiting{}) {
		t.Errorf("a stream never opened: Awaiting = %+v, want none", got)
	}
}
