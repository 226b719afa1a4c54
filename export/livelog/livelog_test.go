package livelog_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

const node = "sidecar~10.0.0.1~app-1.default~default.svc.cluster.local"

func cdsPush(version string) track.Push {
	return track.Push{
		StreamID: 3, Ref: stream3, Node: track.Node{ID: node}, TypeURL: codec.TypeCluster, Type: "cds",
		Version: version, Nonce: version + "abc", Resources: 120, Bytes: 1258291,
		Diff:   track.Diff{Added: 2, Changed: 1, Unchanged: 117},
		SentAt: t0,
	}
}

// lines runs events through the live log in the human format and returns its
// lines without their timestamps.
func lines(events ...track.Event) []string {
	var buf bytes.Buffer
	l := livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(&buf, slog.LevelInfo))}})
	for _, e := range eventtest.Tracked(events...) {
		l.OnEvent(e)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line != "" {
			out = append(out, line[len("15:04:05.000 "):])
		}
	}
	return out
}

func TestLiveLogLines(t *testing.T) {
	leakcheck.Check(t)
	nack := track.PushEnded{Push: new(cdsPush("2026-11-30T09:00:01Z/43")), Result: track.ResultNACK, At: t0.Add(3 * time.Millisecond),
		Latency: 3 * time.Millisecond, ErrorCode: 3, Error: "cluster outbound|9080||ratings: unknown lb_policy"}
	got := lines(
		track.PushEnded{Push: new(cdsPush("2026-11-30T09:00:00Z/42")), Result: track.ResultACK, At: t0.Add(14 * time.Millisecond), Latency: 14 * time.Millisecond},
		nack,
		track.DetectorStarted{Detector: track.DetectorNACKStorm, Key: "stream 3 cds", At: t0, Count: 5, Detail: "5 NACKs of cds on stream 3 within 30s"},
		track.FullSyncComplete{StreamID: 3, Node: track.Node{ID: node}, Elapsed: 1234 * time.Millisecond, Types: []string{codec.TypeCluster, codec.TypeListener}},
		track.RequestSeen{StreamID: 3, TypeURL: codec.TypeCluster, Kind: track.KindStale, Nonce: "n41"},
		track.RequestSeen{StreamID: 3, TypeURL: codec.TypeCluster, Kind: track.KindUnobserved, Nonce: "n44"},
		track.RequestSeen{StreamID: 3, TypeURL: codec.TypeCluster, Kind: track.KindACK, Nonce: "n45"},
	)
	want := []string{
		"INFO  CDS v=2026-11-30T09:00:00Z/42 +2 -0 ~1 =117 1.2MB node=" + node + " ACK 14ms stream=3",
		"WARN  CDS v=2026-11-30T09:00:01Z/43 +2 -0 ~1 =117 1.2MB node=" + node + " NACK 3ms: cluster outbound|9080||ratings: unknown lb_policy stream=3",
		"WARN  NACK storm started: 5 NACKs of cds on stream 3 within 30s",
		"INFO  stream 3 full sync complete in 1.234s (CDS LDS) node=" + node,
		"INFO  CDS stale nonce n41 on stream 3 (the client answered an older push)",
		"INFO  CDS answer to nonce n44 on stream 3, a push adstap did not observe (frames were skipped)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("live log (-want +got):\n%s", diff)
	}
}

func TestLiveLogHoldsBackIdenticalNACKs(t *testing.T) {
	leakcheck.Check(t)
	var events []track.Event
	nack := func(at time.Duration, version string) track.PushEnded {
		return track.PushEnded{Push: new(cdsPush(version)), Result: track.ResultNACK, At: t0.Add(at), Latency: time.Millisecond, Error: "rejected"}
	}
	// A snapshot cache re-sending a rejected version: 1000 NACKs in 2 s.
	for i := 0; i < 1000; i++ {
		events = append(events, nack(time.Duration(i)*2*time.Millisecond, "v7"))
	}
	events = append(events,
		nack(6*time.Second, "v7"),         // past the repeat interval: written, with the count
		nack(6001*time.Millisecond, "v8"), // different content: written at once
		track.PushEnded{Push: new(cdsPush("v9")), Result: track.ResultACK, At: t0.Add(7 * time.Second)},
	)
	got := lines(events...)
	if len(got) != 4 {
		t.Fatalf("got %d lines, want 4:\n%s", len(got), strings.Join(got, "\n"))
	}
	if !strings.Contains(got[1], "[+999 identical NACKs since the last line]") {
		t.Errorf("second line %q does not count the 999 held back", got[1])
	}
	if strings.Contains(got[2], "identical") || !strings.Contains(got[2], "v=v8") {
		t.Errorf("third line %q: want the new version's NACK, with nothing held back", got[2])
	}
}

func TestLiveLogJSONCarriesTheFacts(t *testing.T) {
	leakcheck.Check(t)
	var buf bytes.Buffer
	l := livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}})
	l.OnEvent(track.PushEnded{Push: new(cdsPush("v1")), Result: track.ResultNACK, At: t0, Latency: 2 * time.Millisecond, ErrorCode: 3, Error: "bad", ErrorNames: []string{"ratings"}})
	var rec struct {
		Level string
		Msg   string
		XDS   map[string]any `json:"xds"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v in %s", err, buf.String())
	}
	want := map[string]any{"result": "nack", "error": "bad", "type": "cds", "version": "v1", "node": node, "added": 2.0, "unchanged": 117.0, "latency_ms": 2.0}
	for k, v := range want {
		if !cmp.Equal(rec.XDS[k], v) {
			t.Errorf("xds.%s = %v, want %v", k, rec.XDS[k], v)
		}
	}
	if rec.Level != "WARN" {
		t.Errorf("level %s, want WARN", rec.Level)
	}
}

// Below the logger's level a push outcome is not even formatted, but
// identical NACKs are still counted for the next line that is written.
func TestLiveLogBelowItsLevel(t *testing.T) {
	leakcheck.Check(t)
	var buf bytes.Buffer
	l := livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(&buf, slog.LevelWarn))}})
	nack := func(at time.Duration) track.PushEnded {
		return track.PushEnded{Push: new(cdsPush("v7")), Result: track.ResultNACK, At: t0.Add(at), Latency: time.Millisecond, Error: "rejected"}
	}
	l.OnEvent(track.PushEnded{Push: new(cdsPush("v6")), Result: track.ResultACK, At: t0, Latency: time.Millisecond})
	l.OnEvent(nack(time.Second))
	l.OnEvent(nack(2 * time.Second))
	l.OnEvent(nack(7 * time.Second))
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		got = append(got, line[len("15:04:05.000 "):])
	}
	want := []string{
		"WARN  CDS v=v7 +2 -0 ~1 =117 1.2MB node=" + node + " NACK 1ms: rejected stream=3",
		"WARN  CDS v=v7 +2 -0 ~1 =117 1.2MB node=" + node + " NACK 1ms: rejected [+1 identical NACKs since the last line] stream=3",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("live log at warn (-want +got):\n%s", diff)
	}
}
