package export_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/track"
)

// No lock that every stream takes is on a push's path through the metrics,
// the live log and the spans: streams handled at once, each on a goroutine
// of its own as the observation workers handle them, never wait for one
// another there. A lock they all took would be contended, and the mutex
// profile would name the code of this package that released it; what each
// output keeps of a stream is on the stream (track.OutputState), whose locks no
// other stream takes.
func TestOutputsShareNoLockAcrossStreams(t *testing.T) {
	leakcheck.Check(t)
	defer runtime.SetMutexProfileFraction(runtime.SetMutexProfileFraction(1))
	tr, err := export.NewTracing(context.Background(), export.TracingConfig{Exporter: &recorder{}, QueueSize: 1 << 16,
		Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	m := export.NewMetrics(export.MetricsConfig{TraceID: tr.TraceIDFor}, nil)
	sinks := []track.Sink{export.NewLiveLog(slog.New(enabledHandler{})), m, tr}
	emit := func(e track.Event) {
		for _, s := range sinks {
			s.OnEvent(e)
		}
	}

	before := contendedIn("github.com/adstap/adstap/export.")
	const streams, pushes = 8, 3000
	start := make(chan struct{})
	var wg sync.WaitGroup
	for id := uint64(1); id <= streams; id++ {
		meta := track.StreamMeta{ID: id, Method: ads, Protocol: codec.SotW, OpenedAt: t0}
		ref := track.NewStreamRef(meta)
		emit(track.StreamOpened{Stream: meta, Ref: ref})
		wg.Go(func() {
			<-start
			n := track.Node{ID: fmt.Sprint("sidecar~10.0.0.", id)}
			for i := range pushes {
				at := t0.Add(time.Duration(i) * time.Millisecond)
				p := track.Push{StreamID: id, Ref: ref, Node: n, TypeURL: codec.TypeCluster, Type: "cds",
					Version: fmt.Sprint("v", i%4), Nonce: fmt.Sprint(i), Resources: 3, Bytes: 300, SentAt: at, First: i == 0}
				emit(track.PushSent{Push: p})
				if i%8 == 0 {
					emit(track.FullPush{StreamID: id, Ref: ref, Node: n, Version: p.Version, TypeURL: p.TypeURL, At: at, Count: i/8 + 1})
				}
				result := track.ResultACK
				if i%16 == 0 {
					result = track.ResultNACK
				}
				emit(track.PushEnded{Push: p, Result: result, At: at, Latency: time.Millisecond, Error: "rejected"})
				emit(track.RequestSeen{StreamID: id, Ref: ref, Node: n, TypeURL: p.TypeURL, Kind: track.KindStale, At: at})
			}
			emit(track.StreamClosed{Stream: meta, Ref: ref, Node: n, At: t0.Add(time.Hour)})
		})
	}
	close(start)
	wg.Wait()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := contendedIn("github.com/adstap/adstap/export.")
	var shared []string
	for fn, n := range after {
		if n > before[fn] {
			shared = append(shared, fmt.Sprintf("%s: %d times", fn, n-before[fn]))
		}
	}
	sort.Strings(shared)
	if len(shared) > 0 {
		t.Errorf("streams waited for one another on locks released by:\n%s", strings.Join(shared, "\n"))
	}
}

// contendedIn counts, by the function that released it, the contended
// sync locks (Mutex, RWMutex) the mutex profile holds that a function with
// prefix released. The runtime's own locks (a channel's: the hand-off to an
// output's queue) and sync.Pool's (taken when a processor first uses a
// pool) are not counted: neither is held across an output's work.
func contendedIn(prefix string) map[string]int64 {
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
				if strings.HasPrefix(f.Function, prefix) {
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

// enabledHandler takes every record and writes none: the live log formats
// its lines, and no writer's lock is in the way.
type enabledHandler struct{}

func (enabledHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (enabledHandler) Handle(context.Context, slog.Record) error { return nil }
func (h enabledHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h enabledHandler) WithGroup(string) slog.Handler           { return h }
