package export_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/export/internal/shared"
	"github.com/adstap/adstap/export/livelog"
	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/export/recorder"
	"github.com/adstap/adstap/export/references"
	"github.com/adstap/adstap/export/retained"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/internal/testutil/eventtest"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// No lock that every stream takes is on a frame's or a push's way through
// any output — every one export/output.go names, each made by its New as
// the pipeline makes it: the live log (a real handler on a real
// LogWriter, its Writer), the metrics, the upstream's health, the spans,
// the capture, the retained configuration, the reference check: streams
// handled at once, each on
// a goroutine of its own as the relays and the observation workers handle
// them, never wait for one another there. What each output keeps of a
// stream is on the stream (track.OutputState), whose locks no other stream
// takes.
//
// Two nets: every shared lock an output takes on the way says so
// (shared.Taking), contended or not, and may be taken at most once a stream
// (a new node, a connection attempt), never once a frame; and the mutex
// profile names any contended lock of this package, should one be taken
// without saying so.
func TestOutputsShareNoLockAcrossStreams(t *testing.T) {
	leakcheck.Check(t)
	defer runtime.SetMutexProfileFraction(runtime.SetMutexProfileFraction(1))
	var takenMu sync.Mutex // the test's own, outside the outputs
	taken := map[string]int{}
	defer shared.SetLockHook(func(name string) {
		takenMu.Lock()
		taken[name]++
		takenMu.Unlock()
	})()

	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: &eventtest.SpanRecorder{}, QueueSize: 1 << 16,
		Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	// The log's real way out, and a real handler on it: the live log's
	// lines, and the NACKs' written later on the writer's goroutine.
	logOut := export.NewLogWriter(export.LogWriterConfig{OutputConfig: export.OutputConfig{QueueBytes: 1 << 30}, Writer: io.Discard})
	out := export.OutputConfig{Logger: slog.New(slog.DiscardHandler), QueueBytes: 1 << 30}
	w, err := capture.NewWriter(filepath.Join(t.TempDir(), "xds.capture"), 1<<30, 2, "test", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	capt := recorder.New(recorder.Config{OutputConfig: out, Writer: w})
	// Every output, as the pipeline builds them, told the events in this
	// order and closed in the reverse.
	outputs := []export.Output{
		livelog.New(livelog.Config{OutputConfig: export.OutputConfig{Logger: slog.New(export.NewPretty(logOut, slog.LevelDebug))}, Writer: logOut}),
		metrics.New(metrics.Config{OutputConfig: out, TraceID: tr.TraceIDFor}),
		upstream.New(upstream.Config{OutputConfig: out}),
		tr,
		capt,
		retained.New(retained.Config{OutputConfig: out, MaxBytes: 1 << 30}),
		references.New(references.Config{OutputConfig: out, Spans: tr}),
	}
	checkEveryOutput(t, outputs)
	var sinks []track.Sink
	for _, o := range outputs {
		if s, ok := o.(track.Sink); ok {
			sinks = append(sinks, s)
		}
	}
	emit := func(e track.Event) {
		for _, s := range sinks {
			s.OnEvent(e)
		}
	}

	before := contendedIn("github.com/adstap/adstap/export")
	const streams, pushes = 8, 3000
	start := make(chan struct{})
	var wg sync.WaitGroup
	for id := uint64(1); id <= streams; id++ {
		meta := track.StreamMeta{ID: id, Method: ads, Protocol: codec.SotW, OpenedAt: t0}
		ref := track.NewStreamRef(meta)
		emit(track.StreamOpened{Stream: meta, Ref: ref})
		// Once a stream, before the frames: the hook counts it, and eight
		// streams connecting at the same instant would contend on the
		// upstream's health, a lock said to the hook, not on a frame's path.
		emit(track.UpstreamConnected{UpstreamConnect: codec.UpstreamConnect{Upstream: "127.0.0.1:1", Start: t0}})
		capt.Record(capture.Record{Time: t0, Kind: capture.KindOpen, Stream: id, Method: ads, Protocol: string(codec.SotW)})
		wg.Go(func() {
			<-start
			n := track.Node{ID: fmt.Sprint("sidecar~10.0.0.", id)}
			for i := range pushes {
				at := t0.Add(time.Duration(i) * time.Millisecond)
				capt.Frame(capture.Record{Time: at, Kind: capture.KindFrame, Stream: id, Direction: "response", Size: 3}, mem.BufferSlice{mem.SliceBuffer("abc")})
				p := track.Push{StreamID: id, Ref: ref, Node: n, TypeURL: codec.TypeCluster, Type: "cds",
					Version: fmt.Sprint("v", i%4), Nonce: fmt.Sprint(i), Resources: 3, Bytes: 300, SentAt: at, First: i == 0}
				emit(track.PushSent{Push: new(p)})
				if i%8 == 0 {
					emit(track.FullPush{StreamID: id, Ref: ref, Node: n, Version: p.Version, TypeURL: p.TypeURL, At: at, Count: i/8 + 1})
				}
				result := track.ResultACK
				if i%16 == 0 {
					result = track.ResultNACK
				}
				capt.Frame(capture.Record{Time: at, Kind: capture.KindFrame, Stream: id, Direction: "request", Size: 3}, mem.BufferSlice{mem.SliceBuffer("abc")})
				emit(track.PushEnded{Push: new(p), Result: result, At: at, Latency: time.Millisecond, Error: "rejected"})
				emit(track.RequestSeen{StreamID: id, Ref: ref, Node: n, TypeURL: p.TypeURL, Kind: track.KindStale, At: at})
			}
			emit(track.StreamClosed{Stream: meta, Ref: ref, Node: n, At: t0.Add(time.Hour)})
			capt.Record(capture.Record{Time: t0.Add(time.Hour), Kind: capture.KindClose, Stream: id})
		})
	}
	close(start)
	wg.Wait()
	ctx := context.Background()
	for _, o := range slices.Backward(outputs) {
		if err := o.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := logOut.Close(ctx); err != nil {
		t.Fatal(err)
	}
	after := contendedIn("github.com/adstap/adstap/export")
	var shared []string
	for fn, n := range after {
		if n > before[fn] {
			shared = append(shared, fmt.Sprintf("%s: contended %d times", fn, n-before[fn]))
		}
	}
	takenMu.Lock()
	for name, n := range taken {
		if n > streams {
			shared = append(shared, fmt.Sprintf("%s: taken %d times by %d streams of %d pushes", name, n, streams, pushes))
		}
	}
	takenMu.Unlock()
	sort.Strings(shared)
	if len(shared) > 0 {
		t.Errorf("streams took locks they share, once a frame or more:\n%s", strings.Join(shared, "\n"))
	}
}

// checkEveryOutput fails unless outs hold an output of every name
// export/output.go defines, once each: an output added there is an output
// this test runs.
func checkEveryOutput(t *testing.T, outs []export.Output) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "output.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, o := range outs {
		names[o.Name()]++
	}
	defined := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			for i, id := range spec.(*ast.ValueSpec).Names {
				if !strings.HasSuffix(id.Name, "Output") {
					continue
				}
				lit := spec.(*ast.ValueSpec).Values[i].(*ast.BasicLit)
				name, _ := strconv.Unquote(lit.Value)
				defined++
				if names[name] != 1 {
					t.Errorf("export.%s (%q): %d outputs of that name in the test, want 1", id.Name, name, names[name])
				}
			}
		}
	}
	if defined != len(outs) {
		t.Errorf("export/output.go names %d outputs; the test runs %d", defined, len(outs))
	}
}

// contendedIn counts, by the function that released it, the contended
// sync locks (Mutex, RWMutex) the mutex profile holds that a function of
// package pkg, or of a package under it, released. The runtime's own locks (a channel's: the hand-off to an
// output's queue) and sync.Pool's (taken when a processor first uses a
// pool) are not counted: neither is held across an output's work.
func contendedIn(pkg string) map[string]int64 {
	var records []runtime.BlockProfileRecord
	for {
		n, ok := runtime.MutexProfile(records)
		if ok {
			records = records[:n]
			break
		}
		records = make([]runtime.BlockProfileRecord, n+64)
	}
	out := map[string]int64{}
	for _, r := range records {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasPrefix(f.Function, "runtime.") || strings.HasPrefix(f.Function, "sync.(*Pool)") {
				break
			}
			// The first frame out of package sync is the one that
			// released the lock.
			if !strings.HasPrefix(f.Function, "sync.") && !strings.HasPrefix(f.Function, "internal/sync.") {
				if strings.HasPrefix(f.Function, pkg+".") || strings.HasPrefix(f.Function, pkg+"/") {
					out[f.Function] += r.Count
				}
				break
			}
			if !more {
				break
			}
		}
	}
	return out
}
