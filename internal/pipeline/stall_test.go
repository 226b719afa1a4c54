//go:build unix

package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"

	"github.com/adstap/adstap/capture"
	"github.com/adstap/adstap/export"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/syncbuf"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// stallingWriter is a stderr that takes nothing until released, as a
// terminal whose output is paused or a pipe nobody reads.
type stallingWriter struct {
	release chan struct{}
	out     syncbuf.Buffer
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.out.Write(p)
}

// observed counts, per stream, the pushes the tracker saw acknowledged, and
// the connects and observation gaps it was told of.
type observed struct {
	mu       sync.Mutex
	acks     map[uint64]int
	connects int
	gaps     int
}

func (o *observed) OnEvent(e track.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch e := e.(type) {
	case track.PushEnded:
		if e.Result == track.ResultACK {
			o.acks[e.Push.StreamID]++
		}
	case track.UpstreamConnected:
		o.connects++
	case track.ObservationGap:
		o.gaps++
	}
}

func (o *observed) complete(streams, pushes int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.acks) < streams || o.connects < streams {
		return false
	}
	for _, n := range o.acks {
		if n < pushes {
			return false
		}
	}
	return true
}

// stalledOutputs is a pipeline whose capture file is a FIFO nobody reads and
// whose log goes to a stderr that blocks, in front of a raw upstream that
// pushes every stream pushes CDS versions and expects each ACKed.
type stalledOutputs struct {
	fifo   *syncbuf.FIFO
	stderr *stallingWriter
	logOut *export.LogWriter
	seen   *observed
	p      *pipeline.Running

	releaseOnce  sync.Once
	shutdownOnce sync.Once
}

const (
	stallStreams = 4
	stallPushes  = 20
)

func startStalledOutputs(t *testing.T) *stalledOutputs {
	t.Helper()
	// A file nobody reads: the pipe's buffer fills, then every write of the
	// capture blocks.
	s := &stalledOutputs{fifo: syncbuf.NewFIFO(t), stderr: &stallingWriter{release: make(chan struct{})},
		seen: &observed{acks: map[uint64]int{}}}
	w, err := capture.NewWriter(s.fifo.Path, 0, 1, "stall", "upstream")
	if err != nil {
		t.Fatal(err)
	}
	// Small queues, so that the stall overflows them within a few pushes.
	s.logOut = export.NewLogWriter(export.LogWriterConfig{OutputConfig: export.OutputConfig{QueueBytes: 4 << 10}, Writer: s.stderr})
	log := slog.New(export.NewPretty(s.logOut, slog.LevelInfo))
	pushes := make([][]byte, stallPushes)
	for i := range pushes {
		pushes[i] = xdstest.PushFrame(xdstest.ClusterType, fmt.Sprint("v", i), fmt.Sprint("n", i), xdstest.ClusterAnys(8, 8<<10))
	}
	up := xdstest.StartRawUpstream(t, func(_ any, st grpc.ServerStream) error {
		if _, err := xdstest.Recv(st); err != nil {
			return err
		}
		for _, push := range pushes {
			if err := xdstest.Send(st, push); err != nil {
				return err
			}
			if _, err := xdstest.Recv(st); err != nil {
				return err
			}
		}
		_, err := xdstest.Recv(st) // until the client goes
		return err
	})
	if s.p, err = pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap: tap.Config{Upstream: up.Addr},
		Observe: pipeline.Config{Logger: log, Capture: w, OutputQueueBytes: 256 << 10, RetainMaxBytes: 64 << 20,
			LogWriter: s.logOut, Sinks: []track.Sink{s.seen}},
		Listen: tap.Address{Network: "tcp", Addr: "127.0.0.1:0"},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the test did, nothing stays blocked or running.
		s.release()
		shutdown(t, s, 10*time.Second)
	})
	return s
}

// runClients opens stallStreams streams, each on a connection of its own (so
// each brings an upstream connect), and ACKs every push.
func (s *stalledOutputs) runClients(t *testing.T, ctx context.Context) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, stallStreams)
	for i := range stallStreams {
		cc, err := xdstest.Dial(s.p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- ackAll(ctx, cc, fmt.Sprint("stall-", i))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("client: %v", err)
		}
	}
}

func ackAll(ctx context.Context, cc *grpc.ClientConn, node string) error {
	st, err := xdstest.OpenRaw(ctx, cc, xdstest.ADSMethod)
	if err != nil {
		return err
	}
	if err := xdstest.Send(st, xdstest.RequestFrame(&core.Node{Id: node}, xdstest.ClusterType, "", "", "")); err != nil {
		return err
	}
	for i := range stallPushes {
		if _, err := xdstest.Recv(st); err != nil {
			return fmt.Errorf("push %d: %w", i, err)
		}
		if err := xdstest.Send(st, xdstest.RequestFrame(nil, xdstest.ClusterType, fmt.Sprint("v", i), fmt.Sprint("n", i), "")); err != nil {
			return err
		}
	}
	return nil
}

// release lets stderr and the capture file take what they are given again.
func (s *stalledOutputs) release() {
	s.releaseOnce.Do(func() {
		close(s.stderr.release)
		s.fifo.Release()
	})
}

// capturedBytes is what the capture file received, once it is closed.
func (s *stalledOutputs) capturedBytes() []byte { return s.fifo.Written() }

// TestObservationGoesOnWhileOutputsStall blocks the capture file (a FIFO
// nobody reads) and stderr for at least 5 s while four streams, each on a
// connection of its own, take twenty pushes each: every push is observed,
// every upstream connect reported, no frame goes unobserved; the outputs
// drop what does not fit, and once they take writes again the losses are
// counted and said.
func TestObservationGoesOnWhileOutputsStall(t *testing.T) {
	leakcheck.Check(t)
	s := startStalledOutputs(t)
	stallEnds := time.Now().Add(5 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Everything below happens with both outputs blocked: if observation
	// waited on either, the clients' pushes would still be relayed but the
	// tracker would never see them acknowledged.
	s.runClients(t, ctx)
	xdstest.Eventually(t, "every push of every stream observed, every connect reported", func() bool {
		return s.seen.complete(stallStreams, stallPushes)
	})
	if s.p.Capture.Dropped() == 0 || s.logOut.Dropped() == 0 {
		t.Fatalf("the stall was not felt: capture dropped %d, log dropped %d; the test's queues are too large", s.p.Capture.Dropped(), s.logOut.Dropped())
	}
	<-time.After(time.Until(stallEnds)) // keep the outputs blocked for the whole 5 s

	s.release()
	xdstest.Eventually(t, "the losses said once the outputs recovered", func() bool {
		out := s.stderr.out.String()
		return strings.Contains(out, "log lines dropped while the log's output was blocked") &&
			strings.Contains(out, "capture: ") && strings.Contains(out, "records dropped while the output was behind")
	})
	metrics := scrapeMetrics(t, s.p.Pipeline)
	for _, want := range []string{`adstap_output_dropped_total{output="capture"}`, `adstap_output_dropped_total{output="log"}`} {
		if !strings.Contains(metrics, want) || strings.Contains(metrics, want+" 0\n") {
			t.Errorf("/metrics has no non-zero %s", want)
		}
	}

	cancel()
	shutdown(t, s, 10*time.Second)
	s.seen.mu.Lock()
	gaps := s.seen.gaps
	s.seen.mu.Unlock()
	if gaps != 0 {
		t.Errorf("%d observation gaps: the tracker fell behind the relay while the outputs stalled", gaps)
	}
	// The file says where it lost frames.
	rd := capture.NewReader(bytes.NewReader(s.capturedBytes()), "capture")
	var frames, gapRecords int
	for {
		r, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("capture record: %v", err)
		}
		switch r.Kind {
		case capture.KindFrame:
			frames++
		case capture.KindGap:
			gapRecords++
		}
	}
	if gapRecords == 0 || frames == 0 {
		t.Errorf("capture: %d frames and %d gap records; want both", frames, gapRecords)
	}
}

// TestShutdownEndsWithinTheDrainTimeoutWhileOutputsStall shuts a tap down
// while its capture file and stderr take nothing and their queues are full:
// shutdown ends within the drain timeout, counting what it could not write.
func TestShutdownEndsWithinTheDrainTimeoutWhileOutputsStall(t *testing.T) {
	leakcheck.Check(t)
	s := startStalledOutputs(t)
	ctx, cancel := context.WithCancel(context.Background())
	s.runClients(t, ctx)
	xdstest.Eventually(t, "every push observed", func() bool { return s.seen.complete(stallStreams, stallPushes) })
	cancel()

	// The outputs stay stalled until the test ends, so a shutdown that
	// ignored its deadline would never end: wait far past the drain timeout
	// for it (a bound only a hang reaches, whatever the machine's load), and
	// check that it ended by the drain timeout's path, reporting what it
	// could not write, not because the outputs drained.
	const drain, hang = time.Second, 30 * time.Second
	ctx, cancelDrain := context.WithTimeout(context.Background(), drain)
	defer cancelDrain()
	ended := make(chan error, 1)
	go s.shutdownOnce.Do(func() {
		err := s.p.Close(ctx)
		s.logOut.Close(ctx)
		ended <- err
	})
	select {
	case err := <-ended:
		if err == nil {
			t.Errorf("shutdown with stalled outputs reported nothing it could not write")
		} else {
			t.Logf("shutdown: %v", err)
		}
	case <-time.After(hang):
		t.Fatalf("shutdown still running %v after a drain timeout of %v", hang, drain)
	}
}

// shutdown stops the tap as adstap run does on SIGTERM: the relay, the
// pipeline's outputs, the log, all within drain.
func shutdown(t *testing.T, s *stalledOutputs, drain time.Duration) {
	t.Helper()
	s.shutdownOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		s.p.Close(ctx) // past ctx, an error that says what was dropped
		if err := s.p.Err(); err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.logOut.Close(ctx)
	})
}

func scrapeMetrics(t *testing.T, p *pipeline.Pipeline) string {
	t.Helper()
	families, err := p.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		for _, m := range f.GetMetric() {
			b.WriteString(f.GetName())
			if len(m.GetLabel()) > 0 {
				b.WriteString("{")
				for i, l := range m.GetLabel() {
					if i > 0 {
						b.WriteString(",")
					}
					fmt.Fprintf(&b, "%s=%q", l.GetName(), l.GetValue())
				}
				b.WriteString("}")
			}
			fmt.Fprintf(&b, " %v\n", m.GetCounter().GetValue())
		}
	}
	return b.String()
}
