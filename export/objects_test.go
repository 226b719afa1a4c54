package export_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/internal/xdsconfig"
	"github.com/adstap/adstap/track"
)

// stampedCDS is a CDS response of clusters, each stamped by the
// DestinationRule of its name in shop when rules says one (""; none).
func stampedCDS(t testing.TB, version string, rules map[string]string) (*codec.Response, mem.BufferSlice) {
	t.Helper()
	var clusters []*anypb.Any
	for _, name := range []string{"reviews", "ratings", "details"} {
		c := xdsconfig.Cluster("outbound|9080||"+name+".shop.svc.cluster.local", true)
		if rule, ok := rules[name]; ok {
			c.Metadata = xdsconfig.IstioConfig("destination-rule", "shop", rule)
		}
		clusters = append(clusters, xdstest.MustAny(c))
	}
	return decodedPush(t, xdstest.PushFrame(codec.TypeCluster, version, "n"+version, clusters))
}

// stampedStream is stream 1 of a tracker, whose CDS pushes (stampedCDS)
// and answers go to a sink with the events they make.
type stampedStream struct {
	t    testing.TB
	tk   *track.Tracker
	sink track.Sink
	at   time.Time
}

// openStamped opens stream 1 of tk, node nodeA subscribed to CDS.
func openStamped(t testing.TB, tk *track.Tracker, sink track.Sink) *stampedStream {
	s := &stampedStream{t: t, tk: tk, sink: sink, at: t0}
	s.feed(tk.OpenStream(track.StreamMeta{ID: 1, Method: ads, Protocol: codec.SotW, OpenedAt: s.at}))
	s.feed(tk.Request(1, s.at, &codec.Request{TypeURL: codec.TypeCluster, Node: &codec.NodeIdentity{ID: nodeA}}, 10))
	return s
}

func (s *stampedStream) feed(evs []track.Event) {
	for _, e := range evs {
		s.sink.OnEvent(e)
	}
}

// push sends version, its clusters stamped as rules says, a second later.
func (s *stampedStream) push(version string, rules map[string]string) {
	s.at = s.at.Add(time.Second)
	resp, data := stampedCDS(s.t, version, rules)
	s.feed(s.tk.ResponseFrame(1, s.at, resp, data.Len(), data))
}

// answer ACKs version, or NACKs it with nack, a millisecond later.
func (s *stampedStream) answer(version, nack string) {
	s.at = s.at.Add(time.Millisecond)
	s.feed(s.tk.Request(1, s.at, cdsAnswer(version, nack), 10))
}

// cdsAnswer is the ACK (or, with nack, the NACK) of the CDS push of
// version, whose nonce is "n" and the version.
func cdsAnswer(version, nack string) *codec.Request {
	req := &codec.Request{TypeURL: codec.TypeCluster, ResponseNonce: "n" + version, VersionInfo: version}
	if nack != "" {
		req.ErrorDetail = &codec.ErrorDetail{Code: 3, Message: nack}
	}
	return req
}

// decodedPush is raw as the tap hands a push to the tracker.
func decodedPush(t testing.TB, raw []byte) (*codec.Response, mem.BufferSlice) {
	t.Helper()
	data := mem.BufferSlice{mem.SliceBuffer(raw)}
	var resp codec.Response
	if err := resp.DecodeBuffers(data, false); err != nil {
		t.Fatal(err)
	}
	return &resp, data
}

// TestPushSpansNameTheObjectsOfWhatThePushChanged: through a tracker that
// hands over what it kept, as the pipeline wires it, each push span names
// the DestinationRules of the clusters its push changed (and only those),
// whatever the push's outcome, and nothing stays kept once the spans are out.
func TestPushSpansNameTheObjectsOfWhatThePushChanged(t *testing.T) {
	leakcheck.Check(t)
	rec := &eventtest.SpanRecorder{}
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: rec, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	tk := track.New(track.Config{})
	tk.TakeChanged()
	s := openStamped(t, tk, tr)
	s.push("1", map[string]string{"reviews": "reviews"}) // everything is new: reviews' rule
	s.answer("1", "")
	s.push("2", map[string]string{"reviews": "reviews", "ratings": "ratings"}) // ratings changed
	s.answer("2", "cluster outbound|9080||ratings.shop.svc.cluster.local: unknown lb_policy")
	s.push("3", map[string]string{"reviews": "reviews", "details": "details"}) // superseded
	s.push("4", map[string]string{"reviews": "reviews-v2", "details": "details"})
	s.feed(tk.CloseStream(1, s.at.Add(time.Second), 0, ""))
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	type got struct{ Result, Paths, Events string }
	var spans []got
	// In the order of the pushes: a span waiting for its objects is
	// exported after those that need none.
	ended := pushSpans(rec.Spans())
	slices.SortFunc(ended, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	for _, s := range ended {
		var g got
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "xds.result":
				g.Result = kv.Value.AsString()
			case "xds.istio_config":
				g.Paths = fmt.Sprint(kv.Value.AsStringSlice())
			}
		}
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if ev.Name == "istio config" && kv.Key == "istio.object" {
					g.Events += kv.Value.AsString() + " "
				}
			}
		}
		spans = append(spans, g)
	}
	const dr = "/apis/networking.istio.io/v1/namespaces/shop/destination-rule/"
	want := []got{
		{"ack", "[" + dr + "reviews]", "destination-rule/shop/reviews "},
		{"nack", "[" + dr + "ratings]", "destination-rule/shop/ratings "},
		// Against the state the client acknowledged, version 1 (2 was
		// rejected): details changed, and ratings is back as it was.
		{"superseded", "[" + dr + "details]", "destination-rule/shop/details "},
		{"closed", "[" + dr + "reviews-v2 " + dr + "details]", "destination-rule/shop/reviews-v2 destination-rule/shop/details "},
	}
	if diff := cmp.Diff(want, spans); diff != "" {
		t.Errorf("push spans (-want +got):\n%s", diff)
	}
	if k := tk.Kept(); k.Bytes != 0 {
		t.Errorf("the tracker still counts %d bytes kept once the spans are out", k.Bytes)
	}
}

// TestUnsampledPushSpansLetGoOfWhatTheirPushKept: a push span the sampler
// drops reads nothing, and lets go of the bytes at once.
func TestUnsampledPushSpansLetGoOfWhatTheirPushKept(t *testing.T) {
	leakcheck.Check(t)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	rec := &eventtest.SpanRecorder{}
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: rec, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	tk := track.New(track.Config{})
	tk.TakeChanged()
	feed := func(evs []track.Event) {
		for _, e := range evs {
			tr.OnEvent(e)
		}
	}
	feed(tk.OpenStream(track.StreamMeta{ID: 1, Method: ads, Protocol: codec.SotW, OpenedAt: t0}))
	feed(tk.Request(1, t0, &codec.Request{TypeURL: codec.TypeCluster}, 10))
	resp, data := stampedCDS(t, "1", map[string]string{"reviews": "reviews"})
	feed(tk.ResponseFrame(1, t0, resp, data.Len(), data))
	if k := tk.Kept(); k.Bytes == 0 {
		t.Fatal("the tracker kept nothing of the push")
	}
	feed(tk.Request(1, t0, &codec.Request{TypeURL: codec.TypeCluster, ResponseNonce: "n1", VersionInfo: "1"}, 10))
	if k := tk.Kept(); k.Bytes != 0 {
		t.Errorf("the tracker still counts %d bytes kept after the ACK of a push whose span was not sampled", k.Bytes)
	}
}

// BenchmarkPushSpanObjects is a push and its ACK through the tracker and
// the tracing sink, side by side without and with the objects of what the
// push changed (one stamped cluster of ten, as a DestinationRule's edit
// makes it): what the tracker's goroutine pays for them is handing the kept
// bytes over and finding them again as the span ends; the reading is on the
// span queue's goroutine (origin's BenchmarkStampedOneCluster).
func BenchmarkPushSpanObjects(b *testing.B) {
	pushes := make([]struct {
		resp *codec.Response
		data mem.BufferSlice
	}, benchRounds)
	for i := range pushes {
		var clusters []*anypb.Any
		for k := range 10 {
			c := xdsconfig.Cluster(fmt.Sprintf("outbound|9080||svc-%d.shop.svc.cluster.local", k), true)
			if k == 0 {
				c.Metadata = xdsconfig.IstioConfig("destination-rule", "shop", fmt.Sprint("svc-0-", i%2))
			}
			clusters = append(clusters, xdstest.MustAny(c))
		}
		pushes[i].resp, pushes[i].data = decodedPush(b, xdstest.PushFrame(codec.TypeCluster, fmt.Sprint("2026-11-30T09:00:00Z/", 100+i), fmt.Sprint(i), clusters))
	}
	for _, objects := range []bool{false, true} {
		b.Run(map[bool]string{false: "without-objects", true: "with-objects"}[objects], func(b *testing.B) {
			tr := newBenchTracing(b, tracing.GroupByVersion)
			tk := track.New(track.Config{})
			if objects {
				tk.TakeChanged()
			}
			feed := func(evs []track.Event) {
				for _, e := range evs {
					tr.OnEvent(e)
				}
			}
			feed(tk.OpenStream(benchMeta(benchStream)))
			feed(tk.Request(benchStream, t0, &codec.Request{TypeURL: codec.TypeCluster, Node: &codec.NodeIdentity{ID: benchNode}}, 10))
			b.ReportAllocs()
			at := t0
			for i := 0; b.Loop(); i++ {
				p := &pushes[i%benchRounds]
				at = at.Add(time.Millisecond)
				feed(tk.ResponseFrame(benchStream, at, p.resp, p.data.Len(), p.data))
				feed(tk.Request(benchStream, at, &codec.Request{TypeURL: codec.TypeCluster, ResponseNonce: p.resp.Nonce, VersionInfo: p.resp.VersionInfo}, 10))
			}
		})
	}
}

// TestLiveLogReadsANACKsObjectsOnItsWritersGoroutine: with a Writer, as
// the pipeline wires the log writer, a NACK's line waits for the writer's
// goroutine, which reads the objects it rejected there, and the stream's
// next lines wait behind it, in order; the tracker letting go of the
// rejection meanwhile (the next push's ACK) loses nothing.
func TestLiveLogReadsANACKsObjectsOnItsWritersGoroutine(t *testing.T) {
	leakcheck.Check(t)
	var buf strings.Builder
	var waiting laterWriter
	l := livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(&buf, slog.LevelInfo))}, Writer: &waiting})
	s := openStamped(t, track.New(track.Config{}), l)
	s.push("1", map[string]string{"reviews": "reviews"})
	s.answer("1", "")
	s.push("2", map[string]string{"reviews": "reviews", "ratings": "ratings"})
	s.answer("2", "cluster outbound|9080||ratings.shop.svc.cluster.local: unknown lb_policy")
	s.push("3", map[string]string{"reviews": "reviews"})
	s.answer("3", "")

	before := buf.String()
	if strings.Contains(before, "NACK") || strings.Contains(before, "v=3") {
		t.Fatalf("the NACK's line, or a line after it, was written on the tracker's goroutine:\n%s", before)
	}
	if len(waiting) != 3 {
		t.Fatalf("%d lines wait for the writer's goroutine, want 3 (the NACK's, the next push's as a full push, its ACK's)", len(waiting))
	}
	for _, f := range waiting {
		f()
	}
	after := strings.TrimPrefix(buf.String(), before)
	nack, ack := strings.Index(after, "CDS v=2"), strings.Index(after, "CDS v=3")
	if nack < 0 || ack < nack {
		t.Fatalf("want the NACK's line, then the next ACK's, got:\n%s", after)
	}
	if line := after[nack:ack]; !strings.Contains(line, "NACK") || !strings.Contains(line, " — ") || !strings.Contains(line[strings.Index(line, " — "):], "shop/ratings") {
		t.Errorf("the NACK's line does not name the DestinationRule it rejected: %s", line)
	}
}

// laterWriter is a livelog.Writer whose goroutine is the test's: what
// waits for it runs when the test says.
type laterWriter []func()

func (w *laterWriter) Later(f func()) bool {
	*w = append(*w, f)
	return true
}

func (w *laterWriter) Dropped() uint64 { return 0 }

// pushSpans keeps the push spans of spans.
func pushSpans(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasSuffix(s.Name(), " push") {
			out = append(out, s)
		}
	}
	return out
}
