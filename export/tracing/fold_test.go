package tracing_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// attrOf is a span's attribute, or an invalid value.
func attrOf(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// foldedSpans are the episode spans among spans.
func foldedSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasSuffix(s.Name(), " (folded)") {
			out = append(out, s)
		}
	}
	return out
}

// loopEvents is one stream whose CDS push, the same each time, is NACKed n
// times in a row, every step apart, then once ACKed in another version.
func loopEvents(n int, step time.Duration) (events []track.Event, ref *track.StreamRef) {
	m := track.StreamMeta{ID: 7, Method: ads, Protocol: codec.SotW, OpenedAt: t0}
	ref = track.NewStreamRef(m)
	events = append(events, track.StreamOpened{Stream: m, Ref: ref})
	node := track.Node{ID: nodeA}
	at := t0
	for i := range n {
		p := track.Push{StreamID: 7, Ref: ref, Node: node, TypeURL: codec.TypeCluster, Type: "cds", Version: "v1", FullPush: true,
			Nonce: fmt.Sprint(i + 1), Content: 0xabc, SentAt: at}
		events = append(events, track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: track.ResultNACK, At: at.Add(step / 2),
			ErrorCode: 3, Error: "cluster outbound|8080||svc: unexpected lbPolicy MAGLEV", ErrorNames: []string{"outbound|8080||svc"}})
		at = at.Add(step)
	}
	p := track.Push{StreamID: 7, Ref: ref, Node: node, TypeURL: codec.TypeCluster, Type: "cds", Version: "v2", FullPush: true,
		Nonce: fmt.Sprint(n + 1), Content: 0xdef, SentAt: at}
	events = append(events, track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: track.ResultACK, At: at.Add(step / 2)})
	return events, ref
}

// A NACK loop of 1,000 identical NACKs within a second: the first
// FoldAfter are push spans of their own, the rest one episode span in the
// version's trace that counts them, names the first and last nonce and
// the NACK's message, and links to the loop's first push span; the ACK of
// the next version, which ends the loop, is a span of its own.
func TestANACKLoopFoldsIntoOneEpisodeSpan(t *testing.T) {
	leakcheck.Check(t)
	const n = 1000
	events, _ := loopEvents(n, time.Millisecond)
	spans := eventtest.TraceSpans(t, tracing.Config{Scope: "s"}, events)
	pushes, folded := pushSpans(spans), foldedSpans(spans)
	if len(pushes) != tracing.FoldAfter+1 || len(folded) != 1 {
		t.Fatalf("%d push spans and %d episode spans, want %d and 1", len(pushes), len(folded), tracing.FoldAfter+1)
	}
	ep := folded[0]
	for k, want := range map[string]any{
		"xds.folded.count": int64(n - tracing.FoldAfter), "xds.folded.nacks": int64(n - tracing.FoldAfter), "xds.folded.acks": int64(0),
		"xds.folded.first_nonce": fmt.Sprint(tracing.FoldAfter + 1), "xds.folded.last_nonce": fmt.Sprint(n),
		"xds.folded.reason": "repeated", "xds.result": "nack", "xds.type": "cds", "xds.version": "v1", "xds.push_id": "v1",
		"xds.error.message": "cluster outbound|8080||svc: unexpected lbPolicy MAGLEV", "xds.node.id": nodeA,
	} {
		if got := attrOf(ep, k).AsInterface(); got != want {
			t.Errorf("episode span %s = %v, want %v", k, got, want)
		}
	}
	if ep.Name() != "CDS push (folded)" || ep.Status().Description == "" {
		t.Errorf("episode span %q with status %+v", ep.Name(), ep.Status())
	}
	if got, want := ep.SpanContext().TraceID(), tracing.VersionTraceID("s", "v1"); got != want {
		t.Errorf("episode span in trace %s, want the version's %s", got, want)
	}
	if got, want := ep.StartTime(), t0.Add(tracing.FoldAfter*time.Millisecond); !got.Equal(want) {
		t.Errorf("episode starts at %v, want %v (its first folded push)", got, want)
	}
	var linked bool
	for _, l := range ep.Links() {
		linked = linked || l.SpanContext.SpanID() == pushes[0].SpanContext().SpanID()
	}
	if !linked {
		t.Errorf("the episode span does not link to the loop's first push span: %+v", ep.Links())
	}
	if got := attrOf(pushes[0], "xds.error.message").AsString(); got == "" {
		t.Error("the loop's first NACK span lacks its message")
	}
	if got := attrOf(pushes[len(pushes)-1], "xds.result").AsString(); got != "ack" {
		t.Errorf("the last push span is %q, want the ACK of v2", got)
	}
}

// An episode that never ends is cut at FoldInterval: the next episode
// of the run goes to a trace of its own, linked to the first, and the
// tracker's clock ends one that no push ends.
func TestALongLoopIsCutIntoEpisodesOfBoundedLength(t *testing.T) {
	leakcheck.Check(t)
	events, _ := loopEvents(95, time.Second) // 95 s, one NACK a second
	rec := &eventtest.SpanRecorder{}
	tr, err := tracing.New(context.Background(), tracing.Config{Scope: "s", Exporter: rec, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-2:] // the ACK of v2
	for _, e := range events[:len(events)-2] {
		tr.OnEvent(e)
	}
	// No push for long after the last NACK: the clock ends its episode.
	tr.Tick(t0.Add(200 * time.Second))
	for _, e := range last {
		tr.OnEvent(e)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	folded := foldedSpans(rec.Spans())
	if len(folded) < 3 || len(folded) > 5 {
		t.Fatalf("%d episode spans for 95 s of loop, want one per %s", len(folded), tracing.FoldInterval)
	}
	total := 0
	first := folded[0]
	for i, ep := range folded {
		total += int(attrOf(ep, "xds.folded.count").AsInt64())
		if d := ep.EndTime().Sub(ep.StartTime()); d > tracing.FoldInterval {
			t.Errorf("episode %d lasts %s, past %s", i, d, tracing.FoldInterval)
		}
		if i == 0 {
			continue
		}
		if ep.SpanContext().TraceID() == first.SpanContext().TraceID() {
			t.Errorf("episode %d is in the first's trace", i)
		}
		var linked bool
		for _, l := range ep.Links() {
			linked = linked || l.SpanContext.SpanID() == first.SpanContext().SpanID()
		}
		if !linked || !attrOf(ep, "xds.folded.continues").AsBool() {
			t.Errorf("episode %d does not say it continues the first", i)
		}
	}
	if total != 95-tracing.FoldAfter {
		t.Errorf("the episodes count %d pushes, want %d", total, 95-tracing.FoldAfter)
	}
}

// Whatever the pushes, a stream writes at most MaxSpansPerStream spans in
// one trace: pushes of one version whose content changes every time (no
// repeat) fold past the bound into an episode of a trace of its own.
func TestSpansPerTracePerStreamAreBounded(t *testing.T) {
	leakcheck.Check(t)
	const limit, n = 20, 500
	m := track.StreamMeta{ID: 3, Method: ads, Protocol: codec.SotW, OpenedAt: t0}
	ref := track.NewStreamRef(m)
	events := []track.Event{track.StreamOpened{Stream: m, Ref: ref}}
	for i := range n {
		p := track.Push{StreamID: 3, Ref: ref, TypeURL: codec.TypeEndpoint, Type: "eds", Version: "v9", FullPush: true,
			Nonce: fmt.Sprint(i), Content: uint64(i + 1), SentAt: t0.Add(time.Duration(i) * time.Millisecond)}
		events = append(events, track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: track.ResultACK, At: p.SentAt})
	}
	spans := eventtest.TraceSpans(t, tracing.Config{Scope: "s", MaxSpansPerStream: limit}, events)
	inTrace := 0
	folded := 0
	for _, s := range spans {
		if s.SpanContext().TraceID() == tracing.VersionTraceID("s", "v9") {
			inTrace++
		}
		folded += int(attrOf(s, "xds.folded.count").AsInt64())
	}
	if inTrace != limit {
		t.Errorf("%d spans of the stream in v9's trace, want %d", inTrace, limit)
	}
	if folded != n-limit {
		t.Errorf("episode spans count %d pushes, want %d", folded, n-limit)
	}
	for _, s := range foldedSpans(spans) {
		if got := attrOf(s, "xds.folded.reason").AsString(); got != "trace_limit" {
			t.Errorf("xds.folded.reason = %q, want trace_limit", got)
		}
	}
}

// Pushes with new versions, or new content ACKed, are no repeats: each
// keeps its span.
func TestNoFoldingWithoutRepeats(t *testing.T) {
	leakcheck.Check(t)
	m := track.StreamMeta{ID: 4, Method: ads, Protocol: codec.SotW, OpenedAt: t0}
	ref := track.NewStreamRef(m)
	events := []track.Event{track.StreamOpened{Stream: m, Ref: ref}}
	for i := range 50 {
		p := track.Push{StreamID: 4, Ref: ref, TypeURL: codec.TypeCluster, Type: "cds", Version: fmt.Sprint("v", i), FullPush: true,
			Content: 1, SentAt: t0}
		events = append(events, track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: track.ResultACK, At: t0})
	}
	spans := eventtest.TraceSpans(t, tracing.Config{}, events)
	if got := len(pushSpans(spans)); got != 50 || len(foldedSpans(spans)) != 0 {
		t.Errorf("%d push spans and %d episodes, want 50 and none", got, len(foldedSpans(spans)))
	}
}

// Folded pushes reach adstap_spans_folded_total, whose exemplar names the
// episode's span.
func TestFoldedPushesAreCountedWithTheEpisodeAsExemplar(t *testing.T) {
	leakcheck.Check(t)
	const n = 50
	events, _ := loopEvents(n, time.Millisecond)
	rec := &eventtest.SpanRecorder{}
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: rec, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Config{SpansDropped: tr.Drops})
	tr.CountFolds(m.SpansFolded)
	for _, e := range events {
		tr.OnEvent(e)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	folded := foldedSpans(rec.Spans())
	if len(folded) != 1 {
		t.Fatalf("%d episode spans, want 1", len(folded))
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, f := range families {
		switch f.GetName() {
		case "adstap_spans_folded_total":
			c := f.GetMetric()[0].GetCounter()
			ex := map[string]string{}
			for _, l := range c.GetExemplar().GetLabel() {
				ex[l.GetName()] = l.GetValue()
			}
			if c.GetValue() != n-tracing.FoldAfter || ex["span_id"] != folded[0].SpanContext().SpanID().String() ||
				ex["trace_id"] != folded[0].SpanContext().TraceID().String() {
				t.Errorf("adstap_spans_folded_total = %v with exemplar %v; want %d and the episode span %s", c.GetValue(), ex, n-tracing.FoldAfter, folded[0].SpanContext().SpanID())
			}
			seen = true
		case "adstap_spans_dropped_total":
			if len(f.GetMetric()) != 3 {
				t.Errorf("adstap_spans_dropped_total has %d series, want one per reason", len(f.GetMetric()))
			}
		}
	}
	if !seen {
		t.Error("no adstap_spans_folded_total")
	}
}

// During a NACK storm, NACKs of the version fold even when the control
// plane changes what it sends each time; once the storm is over, a NACK of
// new content is a span of its own again.
func TestNACKsFoldDuringAStorm(t *testing.T) {
	leakcheck.Check(t)
	m := track.StreamMeta{ID: 9, Method: ads, Protocol: codec.SotW, OpenedAt: t0}
	ref := track.NewStreamRef(m)
	events := []track.Event{track.StreamOpened{Stream: m, Ref: ref}}
	nack := func(i int) {
		p := track.Push{StreamID: 9, Ref: ref, TypeURL: codec.TypeCluster, Type: "cds", Version: "v1", FullPush: true,
			Nonce: fmt.Sprint(i), Content: uint64(100 + i), SentAt: t0.Add(time.Duration(i) * time.Second)}
		events = append(events, track.PushSent{Push: new(p)}, track.PushEnded{Push: new(p), Result: track.ResultNACK, At: p.SentAt, Error: fmt.Sprint("bad ", i)})
	}
	nack(0)
	events = append(events, track.DetectorStarted{Detector: track.DetectorNACKStorm, StreamID: 9, Ref: ref, TypeURL: codec.TypeCluster, At: t0})
	for i := 1; i <= 20; i++ {
		nack(i)
	}
	events = append(events, track.DetectorEnded{Detector: track.DetectorNACKStorm, StreamID: 9, Ref: ref, TypeURL: codec.TypeCluster, At: t0.Add(21 * time.Second)})
	nack(21)
	spans := eventtest.TraceSpans(t, tracing.Config{}, events)
	folded := foldedSpans(spans)
	if len(folded) != 1 || attrOf(folded[0], "xds.folded.reason").AsString() != "nack_storm" {
		t.Fatalf("%d episode spans (%v), want one of the storm", len(folded), folded)
	}
	if got, want := int(attrOf(folded[0], "xds.folded.nacks").AsInt64()), 21-tracing.FoldAfter; got != want {
		t.Errorf("the storm's episode folded %d NACKs, want %d", got, want)
	}
	if got, want := len(pushSpans(spans)), tracing.FoldAfter+1; got != want {
		t.Errorf("%d push spans, want %d: the storm's first and the NACK after it", got, want)
	}
}
