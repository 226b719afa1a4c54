package tap_test

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	"github.com/adstap/adstap/tap"
)

// recorder is an Observer that writes down what it is told, as one line per call.
type recorder struct {
	mu     sync.Mutex
	events []string
	closed chan struct{}
}

func newRecorder() *recorder { return &recorder{closed: make(chan struct{}, 16)} }

func (r *recorder) observer() tap.Observer {
	return tap.ObserverFuncs{
		StreamOpenFunc: func(s tap.StreamInfo) {
			r.add(fmt.Sprintf("open %s auth=%s", s.Method, s.Header.Get("authorization")))
		},
		FrameFunc: func(s tap.StreamInfo, f tap.Frame) {
			if s.Header != nil {
				r.add("header held after open") // the stream holds its own copy while idle
			}
			r.add(fmt.Sprintf("%s %q size=%d skipped=%d", f.Direction, f.Data.Materialize(), f.Size, f.Skipped))
		},
		StreamCloseFunc: func(s tap.StreamInfo, e tap.StreamEnd) {
			if s.Header != nil {
				r.add("header held after open")
			}
			r.add(fmt.Sprintf("close %s by %s", e.Code, e.By))
			r.closed <- struct{}{}
		},
	}
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func TestObserverSeesFramesInTheOrderTheyCrossed(t *testing.T) {
	leakcheck.Check(t)
	// The upstream pushes, the client answers each push: the observer must see
	// every push before the answer to it.
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		if _, err := xdstest.Recv(s); err != nil { // the initial request
			return err
		}
		for i := 1; i <= 3; i++ {
			if err := xdstest.Send(s, fmt.Appendf(nil, "push %d", i)); err != nil {
				return err
			}
			if _, err := xdstest.Recv(s); err != nil {
				return err
			}
		}
		return nil
	})
	rec := newRecorder()
	_, addr := startTap(t, tap.Config{Upstream: up.Addr, Observer: rec.observer()}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer secret")
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	if err := xdstest.Send(s, []byte("subscribe")); err != nil {
		t.Fatal(err)
	}
	for {
		b, err := xdstest.Recv(s)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := xdstest.Send(s, append([]byte("ack "), b...)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-rec.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the observer was never told the stream closed")
	}
	want := []string{
		"open " + xdstest.ADSMethod + " auth=[Bearer secret]",
		`request "subscribe" size=9 skipped=0`,
		`response "push 1" size=6 skipped=0`,
		`request "ack push 1" size=10 skipped=0`,
		`response "push 2" size=6 skipped=0`,
		`request "ack push 2" size=10 skipped=0`,
		`response "push 3" size=6 skipped=0`,
		`request "ack push 3" size=10 skipped=0`,
		"close " + codes.OK.String() + " by upstream",
	}
	if diff := cmp.Diff(want, rec.get()); diff != "" {
		t.Errorf("observed (-want +got):\n%s", diff)
	}
}

func TestSlowObserverNeverSlowsTheRelayAndSkipsAreCounted(t *testing.T) {
	leakcheck.Check(t)
	var atUpstream digestLog
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&atUpstream))
	release := make(chan struct{})
	var mu sync.Mutex
	var delivered, skipped int
	closed := make(chan tap.StreamEnd, 1)
	obs := tap.ObserverFuncs{
		FrameFunc: func(_ tap.StreamInfo, f tap.Frame) {
			<-release // an observer stuck until the relay is done
			mu.Lock()
			delivered++
			skipped += f.Skipped
			mu.Unlock()
		},
		StreamCloseFunc: func(_ tap.StreamInfo, e tap.StreamEnd) { closed <- e },
	}
	_, addr := startTap(t, tap.Config{Upstream: up.Addr, Observer: obs, ObserveQueueFrames: 8}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	const n = 200
	for i := 0; i < n; i++ {
		if err := xdstest.Send(s, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := xdstest.Recv(s); err != nil {
			t.Fatalf("frame %d not relayed while the observer is stuck: %v", i, err)
		}
	}
	s.CloseSend()
	if _, err := xdstest.Recv(s); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	close(release)
	var end tap.StreamEnd
	select {
	case end = <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("no close")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := delivered + skipped + end.Skipped; got != 2*n {
		t.Errorf("delivered %d + skipped %d + skipped at end %d = %d, want every one of the %d frames accounted for", delivered, skipped, end.Skipped, got, 2*n)
	}
	if skipped+end.Skipped == 0 {
		t.Error("a stuck observer with a queue of 8 skipped nothing")
	}
}

// A frame larger than the whole byte bound is observed, held apart from
// the bound, one at a time: while it is held, another such frame is
// skipped and counted, and small frames (its ACK) still fit.
func TestFrameOverTheByteBoundIsObservedOneAtATime(t *testing.T) {
	leakcheck.Check(t)
	var atUpstream digestLog
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&atUpstream))
	type seenFrame struct {
		dir           tap.Direction
		size, skipped int
	}
	seen, release := make(chan seenFrame, 4), make(chan struct{}, 4)
	obs := tap.ObserverFuncs{FrameFunc: func(_ tap.StreamInfo, f tap.Frame) {
		seen <- seenFrame{f.Direction, f.Size, f.Skipped}
		<-release
	}}
	const bound = 1 << 10
	srv, addr := startTap(t, tap.Config{Upstream: up.Addr, Observer: obs, ObserveQueueBytes: bound}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	exchange := func(size int) {
		t.Helper()
		if err := xdstest.Send(s, make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		if _, err := xdstest.Recv(s); err != nil {
			t.Fatal(err)
		}
	}
	next := func(want seenFrame) {
		t.Helper()
		select {
		case got := <-seen:
			if got != want {
				t.Errorf("observed %+v, want %+v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%+v never observed", want)
		}
	}

	// Ten times the bound: observed. Its answer, as large, while the
	// observer holds it: skipped.
	exchange(10 * bound)
	next(seenFrame{tap.Request, 10 * bound, 0})
	if got := srv.ObserveQueue(); got.Bytes != 10*bound || got.OverBound != 1 {
		t.Errorf("observe queue %+v while the large frame is held, want 10 KiB held and 1 over the bound", got)
	}
	// Small frames still fit beside it, the first saying what was skipped.
	exchange(100)
	xdstest.Eventually(t, "both small frames to be queued", func() bool { return srv.ObserveQueue().Bytes == 10*bound+200 })
	release <- struct{}{}
	next(seenFrame{tap.Request, 100, 1})
	release <- struct{}{}
	next(seenFrame{tap.Response, 100, 0})
	release <- struct{}{}
	xdstest.Eventually(t, "every frame to be let go", func() bool { return srv.ObserveQueue().Bytes == 0 })
	// Once it is let go, the next large frame is observed.
	exchange(10 * bound)
	next(seenFrame{tap.Request, 10 * bound, 0})
	release <- struct{}{}
	xdstest.Eventually(t, "the large frame to be let go", func() bool { return srv.ObserveQueue().Bytes == 0 })
	if got := srv.ObserveQueue().OverBound; got != 2 {
		t.Errorf("%d frames over the bound, want 2", got)
	}
}

// An idle stream holds no observation goroutine: the tap's few observation
// workers take a stream only while it has frames queued, and the next frame
// after an idle spell is observed, in order, by whichever worker is free.
func TestIdleStreamHoldsNoObservationGoroutine(t *testing.T) {
	leakcheck.Check(t)
	pushes, done := make(chan []byte), make(chan struct{})
	finish := sync.OnceFunc(func() { close(done) })
	defer finish()
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), func(_ any, s grpc.ServerStream) error {
		// The subscription first, so that it is observed before any push.
		if _, err := xdstest.Recv(s); err != nil {
			return err
		}
		for {
			select {
			case b := <-pushes:
				if err := xdstest.Send(s, b); err != nil {
					return err
				}
			case <-done:
				return nil
			}
		}
	})
	seen := make(chan string, 4)
	obs := tap.ObserverFuncs{FrameFunc: func(_ tap.StreamInfo, f tap.Frame) { seen <- string(f.Data.Materialize()) }}
	const workers = 2
	_, addr := startTap(t, tap.Config{Upstream: up.Addr, Observer: obs, ObserveWorkers: workers}, nil)
	cc := xdstest.MustDial(t, addr)
	// Longer than the wait below, so that the wait, not the stream's end,
	// says what went wrong.
	ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.WaitTimeout)
	defer cancel()
	s := xdstest.MustOpenRaw(t, ctx, cc, xdstest.ADSMethod)
	if err := xdstest.Send(s, []byte("subscribe")); err != nil {
		t.Fatal(err)
	}
	for _, push := range []string{"push 1", "push 2"} {
		pushes <- []byte(push)
		if b, err := xdstest.Recv(s); err != nil || string(b) != push {
			t.Fatalf("recv = %q, %v; want %q", b, err, push)
		}
		for _, want := range map[string][]string{"push 1": {"subscribe", "push 1"}, "push 2": {"push 2"}}[push] {
			if got := <-seen; got != want {
				t.Fatalf("observed %q, want %q", got, want)
			}
		}
		xdstest.Eventually(t, "the observation workers to leave the stream once it is idle", func() bool {
			return leakcheck.Count("tap.(*observation)") == 0
		})
		if n := leakcheck.Count("created by github.com/adstap/adstap/tap.(*observePool)"); n != workers {
			t.Errorf("%d observation workers, want the %d configured", n, workers)
		}
	}
	finish()
	if _, err := xdstest.Recv(s); err != io.EOF {
		t.Fatalf("stream ended with %v, want EOF", err)
	}
}

// contractObserver checks, for every stream, what tap.Observer promises:
// OnStreamOpen first and OnStreamClose last, requests and responses each in
// the order they crossed, the answer to a request after it, and never two
// calls for a stream at once.
type contractObserver struct {
	mu       sync.Mutex
	streams  map[uint64]*streamContract
	problems []string
	closed   chan struct{}
}

type streamContract struct {
	busy                atomic.Bool
	opened, closed      bool
	requests, responses int
}

func newContractObserver(streams int) *contractObserver {
	return &contractObserver{streams: map[uint64]*streamContract{}, closed: make(chan struct{}, streams)}
}

// call runs check for the stream, noting a call that overlaps another.
// Between the two it yields, so that an overlapping call, if the tap made
// one, would run meanwhile.
func (c *contractObserver) call(id uint64, name string, check func(*streamContract) string) {
	c.mu.Lock()
	s := c.streams[id]
	if s == nil {
		s = &streamContract{}
		c.streams[id] = s
	}
	c.mu.Unlock()
	if !s.busy.CompareAndSwap(false, true) {
		c.problem(id, name+" overlaps another call")
		return
	}
	runtime.Gosched()
	if p := check(s); p != "" {
		c.problem(id, p)
	}
	s.busy.Store(false)
}

func (c *contractObserver) problem(id uint64, p string) {
	c.mu.Lock()
	c.problems = append(c.problems, fmt.Sprintf("stream %d: %s", id, p))
	c.mu.Unlock()
}

func (c *contractObserver) observer() tap.Observer {
	return tap.ObserverFuncs{
		StreamOpenFunc: func(info tap.StreamInfo) {
			c.call(info.ID, "OnStreamOpen", func(s *streamContract) string {
				defer func() { s.opened = true }()
				if s.opened || s.closed || s.requests+s.responses > 0 {
					return "OnStreamOpen after another call"
				}
				return ""
			})
		},
		FrameFunc: func(info tap.StreamInfo, f tap.Frame) {
			c.call(info.ID, "OnFrame", func(s *streamContract) string {
				b := string(f.Data.Materialize())
				if !s.opened || s.closed {
					return fmt.Sprintf("%s %q outside OnStreamOpen … OnStreamClose", f.Direction, b)
				}
				if f.Skipped != 0 {
					return fmt.Sprintf("%d frames skipped", f.Skipped)
				}
				if f.Direction == tap.Request {
					s.requests++
					if want := fmt.Sprintf("q%d", s.requests-1); b != want {
						return fmt.Sprintf("request %q, want %q", b, want)
					}
					return ""
				}
				s.responses++
				if want := fmt.Sprintf("r%d", s.responses-1); b != want {
					return fmt.Sprintf("response %q, want %q", b, want)
				}
				if s.responses > s.requests {
					return fmt.Sprintf("response %q before its request", b)
				}
				return ""
			})
		},
		StreamCloseFunc: func(info tap.StreamInfo, e tap.StreamEnd) {
			c.call(info.ID, "OnStreamClose", func(s *streamContract) string {
				defer func() { s.closed = true }()
				if !s.opened || s.closed {
					return "OnStreamClose before OnStreamOpen, or twice"
				}
				if e.Skipped != 0 {
					return fmt.Sprintf("%d frames skipped at the end", e.Skipped)
				}
				return ""
			})
			c.closed <- struct{}{}
		},
	}
}

// Many streams, each with many frames queued at once, share two observation
// workers: each stream's calls still come in order and never overlap.
func TestObserverKeepsEachStreamsOrderWithFewWorkers(t *testing.T) {
	leakcheck.Check(t)
	const streams, frames = 40, 50
	// The upstream answers request qN with response rN.
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), answerEach(func(b []byte) []byte {
		return append([]byte("r"), b[1:]...)
	}))
	check := newContractObserver(streams)
	_, addr := startTap(t, tap.Config{Upstream: up.Addr, Observer: check.observer(), ObserveWorkers: 2}, nil)
	cc := xdstest.MustDial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.WaitTimeout)
	defer cancel()
	var clients sync.WaitGroup
	for range streams {
		clients.Go(func() {
			s, err := xdstest.OpenRaw(ctx, cc, xdstest.ADSMethod)
			if err != nil {
				t.Errorf("open: %v", err)
				return
			}
			// Every request at once, so that the stream's queue holds many
			// frames while the workers take turns.
			for i := range frames {
				if err := xdstest.Send(s, fmt.Appendf(nil, "q%d", i)); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
			s.CloseSend()
			for i := range frames {
				if b, err := xdstest.Recv(s); err != nil || string(b) != fmt.Sprintf("r%d", i) {
					t.Errorf("recv = %q, %v; want r%d", b, err, i)
					return
				}
			}
			if _, err := xdstest.Recv(s); err != io.EOF {
				t.Errorf("end of stream: %v", err)
			}
		})
	}
	clients.Wait()
	for range streams {
		select {
		case <-check.closed:
		case <-time.After(xdstest.WaitTimeout):
			t.Fatal("not every stream's close was observed")
		}
	}
	check.mu.Lock()
	defer check.mu.Unlock()
	for _, p := range check.problems {
		t.Error(p)
	}
	if len(check.streams) != streams {
		t.Errorf("%d streams observed, want %d", len(check.streams), streams)
	}
	for id, s := range check.streams {
		if s.requests != frames || s.responses != frames {
			t.Errorf("stream %d: %d requests and %d responses observed, want %d of each", id, s.requests, s.responses, frames)
		}
	}
}

// stuckObservation is a tap whose observer blocks on every frame until
// release is called, with one stream that has relayed n requests and their
// answers: 2n frames queued behind the first.
type stuckObservation struct {
	srv     *tap.Server
	release func()
	closed  chan tap.StreamEnd
	served  chan error

	mu                 sync.Mutex
	delivered, skipped int
}

func startStuckObservation(t *testing.T, n int) *stuckObservation {
	t.Helper()
	up := xdstest.ServeRawUpstream(t, xdstest.ListenTCP(t), echoReversed(&digestLog{}))
	release := make(chan struct{})
	o := &stuckObservation{
		release: sync.OnceFunc(func() { close(release) }),
		closed:  make(chan tap.StreamEnd, 1),
		served:  make(chan error, 1),
	}
	t.Cleanup(o.release)
	obs := tap.ObserverFuncs{
		FrameFunc: func(_ tap.StreamInfo, f tap.Frame) {
			<-release
			o.mu.Lock()
			o.delivered++
			o.skipped += f.Skipped
			o.mu.Unlock()
		},
		StreamCloseFunc: func(_ tap.StreamInfo, e tap.StreamEnd) { o.closed <- e },
	}
	srv, err := tap.New(tap.Config{Upstream: up.Addr, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	o.srv = srv
	lis := xdstest.ListenTCP(t)
	go func() { o.served <- srv.Serve(lis) }()
	cc := xdstest.MustDial(t, xdstest.AddressOf(lis))
	s := xdstest.MustOpenRaw(t, context.Background(), cc, xdstest.ADSMethod)
	for i := range n {
		if err := xdstest.Send(s, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := xdstest.Recv(s); err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// counts returns the frames the observer has seen and those it was told
// were skipped.
func (o *stuckObservation) counts() (delivered, skipped int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.delivered, o.skipped
}

// Shutdown with time to spare returns only once the observer has seen every
// frame queued and every stream's end, and the observation workers with it.
func TestShutdownWaitsForQueuedFramesToBeObserved(t *testing.T) {
	leakcheck.Check(t)
	const n = 50
	o := startStuckObservation(t, n)

	ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.WaitTimeout)
	defer cancel()
	shutdown := make(chan struct{})
	go func() {
		o.srv.Shutdown(ctx)
		close(shutdown)
	}()
	// The observer is still stuck on the first frame when Shutdown begins.
	xdstest.Eventually(t, "Shutdown to begin", o.srv.Draining)
	o.release()
	<-shutdown
	if ctx.Err() != nil {
		t.Fatal("Shutdown returned at its deadline, not once the observer was done")
	}
	select {
	case end := <-o.closed:
		if delivered, skipped := o.counts(); delivered != 2*n || skipped+end.Skipped != 0 {
			t.Errorf("delivered %d, skipped %d, want all %d frames delivered", delivered, skipped+end.Skipped, 2*n)
		}
	default:
		t.Error("Shutdown returned before the stream's close was observed")
	}
	if err := <-o.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestShutdownEndsAtItsDeadlineWhileAnObserverIsBehind: with an observer
// stuck on a frame and more frames queued behind it, Shutdown returns at its
// deadline; once the observer returns, the queued frames are dropped and
// counted, every one of them accounted for.
func TestShutdownEndsAtItsDeadlineWhileAnObserverIsBehind(t *testing.T) {
	leakcheck.Check(t)
	const n = 50
	o := startStuckObservation(t, n)

	// The observer stays stuck until released, so a Shutdown that ignored
	// its deadline would never return: wait far past the deadline for it (a
	// bound only a hang reaches, whatever the machine's load), and check it
	// returned because the deadline passed.
	const drain, hang = 300 * time.Millisecond, 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	shutdownDone := make(chan struct{})
	go func() {
		o.srv.Shutdown(ctx)
		close(shutdownDone)
	}()
	select {
	case <-shutdownDone:
		if ctx.Err() == nil {
			t.Error("Shutdown returned before its deadline with the observer still stuck")
		}
	case <-time.After(hang):
		o.release()
		t.Fatalf("Shutdown still waits on the stuck observer %v after a deadline of %v", hang, drain)
	}
	if err := <-o.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	o.release()
	var end tap.StreamEnd
	select {
	case end = <-o.closed:
	case <-time.After(hang):
		t.Fatal("the stream's close was never observed")
	}
	delivered, skipped := o.counts()
	if got := delivered + skipped + end.Skipped; got != 2*n {
		t.Errorf("delivered %d + skipped %d + skipped at end %d = %d, want all %d frames accounted for", delivered, skipped, end.Skipped, got, 2*n)
	}
	if end.Skipped == 0 {
		t.Error("no frame was dropped at the deadline")
	}
}
