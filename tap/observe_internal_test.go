package tap

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/mem"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// waitTimeout only catches a hang: on a loaded 2-core machine under the race
// detector, hundreds of streams taking turns on a few workers take many
// seconds, and a wait for progress must not mistake that for a hang.
const waitTimeout = time.Minute

// seqFrame is a frame whose bytes are its sequence number in its stream.
func seqFrame(seq uint32) Frame {
	return Frame{Direction: Request, Size: 4, Data: mem.BufferSlice{mem.SliceBuffer(binary.BigEndian.AppendUint32(nil, seq))}}
}

func seqOf(f Frame) uint32 { return binary.BigEndian.Uint32(f.Data.Materialize()) }

// callChecker is an Observer that checks the contract for each stream as the
// calls come: OnStreamOpen first, the frames in the order queued, none
// skipped, OnStreamClose last, and never two calls for a stream at once.
type callChecker struct {
	streams []*streamCalls // by StreamInfo.ID
	closed  chan uint64
}

type streamCalls struct {
	busy     atomic.Bool   // a call for the stream is running
	observed atomic.Uint32 // frames observed so far
	progress chan struct{} // signalled (without blocking) after each frame observed

	mu                 sync.Mutex
	opened, closedDone bool
	next               uint32 // the sequence number the next frame must have
	problems           []string
}

func newCallChecker(streams int) *callChecker {
	c := &callChecker{closed: make(chan uint64, streams)}
	for range streams {
		c.streams = append(c.streams, &streamCalls{progress: make(chan struct{}, 1)})
	}
	return c
}

// enter marks a call for the stream as running, noting an overlap if one
// already runs, and yields, so that an overlapping call, if the pool
// allowed one, would run while this one does.
func (c *callChecker) enter(id uint64, call string) *streamCalls {
	s := c.streams[id]
	if !s.busy.CompareAndSwap(false, true) {
		s.problem("%s overlaps another call for the stream", call)
	}
	runtime.Gosched()
	return s
}

func (s *streamCalls) exit() { s.busy.Store(false) }

func (s *streamCalls) problem(format string, a ...any) {
	s.mu.Lock()
	s.problems = append(s.problems, fmt.Sprintf(format, a...))
	s.mu.Unlock()
}

func (c *callChecker) OnStreamOpen(info StreamInfo) {
	s := c.enter(info.ID, "OnStreamOpen")
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opened || s.next != 0 || s.closedDone {
		s.problems = append(s.problems, "OnStreamOpen after another call")
	}
	s.opened = true
}

func (c *callChecker) OnFrame(info StreamInfo, f Frame) {
	s := c.enter(info.ID, "OnFrame")
	defer s.exit()
	seq := seqOf(f)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.opened || s.closedDone:
		s.problems = append(s.problems, fmt.Sprintf("frame %d outside OnStreamOpen … OnStreamClose", seq))
	case seq != s.next || f.Skipped != 0:
		s.problems = append(s.problems, fmt.Sprintf("frame %d (skipped %d), want frame %d", seq, f.Skipped, s.next))
	}
	s.next = seq + 1
	s.observed.Add(1)
	select {
	case s.progress <- struct{}{}:
	default:
	}
}

// waitObserved waits until n frames of the stream have been observed,
// parked on the stream's progress signal rather than spinning: 200 spinning
// producers would take the CPU from the workers they wait for.
func (s *streamCalls) waitObserved(n uint32, timeout <-chan struct{}) bool {
	for s.observed.Load() < n {
		select {
		case <-s.progress:
		case <-timeout:
			return s.observed.Load() >= n
		}
	}
	return true
}

func (c *callChecker) OnStreamClose(info StreamInfo, e StreamEnd) {
	s := c.enter(info.ID, "OnStreamClose")
	s.mu.Lock()
	if !s.opened || s.closedDone {
		s.problems = append(s.problems, "OnStreamClose before OnStreamOpen or twice")
	}
	if e.Skipped != 0 {
		s.problems = append(s.problems, fmt.Sprintf("%d frames skipped at the end", e.Skipped))
	}
	s.closedDone = true
	s.mu.Unlock()
	s.exit()
	c.closed <- info.ID
}

func (*callChecker) OnUpstreamConnect(codec.UpstreamConnect) {}

// endPool closes p and waits for its workers, failing the test if they do
// not end.
func endPool(t *testing.T, p *observePool, workers *sync.WaitGroup) {
	t.Helper()
	p.close()
	ended := make(chan struct{})
	go func() {
		workers.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(waitTimeout):
		t.Fatal("the observation workers did not end after every stream ended and the pool closed")
	}
}

// Many streams share three workers, and each stream's producer queues frames
// while a worker is in the middle of the stream's previous ones, so streams
// go back on the run queue again and again: each stream's calls still come
// in order and never overlap, whichever worker makes them.
//
// Counted as large frames, the queues hold more than the workers keep up
// with, and helpers join them: the same holds.
func TestPoolObservesEachStreamInOrderWithoutOverlap(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int // what each frame counts for in the queues' bytes
	}{
		{"workers", 4},
		{"workers and helpers", helpBytes},
	} {
		t.Run(tc.name, func(t *testing.T) { observeInOrderWithoutOverlap(t, tc.size) })
	}
}

func observeInOrderWithoutOverlap(t *testing.T, size int) {
	leakcheck.Check(t)
	const streams, frames, burst = 200, 300, 8
	check := newCallChecker(streams)
	var workers sync.WaitGroup
	p := newObservePool(check, &byteBudget{limit: 1 << 40}, frames, 3, make(chan struct{}), &workers)

	// One overall bound for the whole run, which only a hang reaches; a
	// closed channel, since every producer waits on it.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	hang := ctx.Done()
	var producers sync.WaitGroup
	for id := range streams {
		producers.Go(func() {
			o := p.startObservation(StreamInfo{ID: uint64(id)})
			s := check.streams[id]
			for seq := range uint32(frames) {
				f := seqFrame(seq)
				f.Size = size
				if !o.frame(f) {
					t.Errorf("stream %d: frame %d refused before the stream's end", id, seq)
				}
				if seq%burst != burst-1 {
					continue
				}
				// A burst is queued: let a worker get half-way through it
				// before queuing the next. The wait is for progress, not
				// for the whole stream: on a loaded machine 200 streams
				// take turns on three workers for a long while.
				if !s.waitObserved(seq+1-burst/2, hang) {
					t.Errorf("stream %d: frame %d never observed", id, seq-burst/2)
					return
				}
			}
			o.close(StreamEnd{By: "client"})
		})
	}
	producers.Wait()
	for range streams {
		select {
		case <-check.closed:
		case <-hang:
			t.Fatal("not every stream's end was observed")
		}
	}
	endPool(t, p, &workers)

	for id, s := range check.streams {
		for _, problem := range s.problems {
			t.Errorf("stream %d: %s", id, problem)
		}
		if s.next != frames {
			t.Errorf("stream %d: observed %d frames, want %d", id, s.next, frames)
		}
	}
}

// An observer stuck on one stream holds one worker; the other workers go on
// observing the other streams. Only when every worker is stuck does the
// observation of the rest wait — the trade-off of a fixed pool — and even
// then the relay does not: frames past the stream's bound are skipped and
// counted, and the rest are observed once a worker is free.
func TestPoolStuckStreamHoldsOnlyItsWorker(t *testing.T) {
	leakcheck.Check(t)
	const queueBound, overflow = 8, 5
	stuck := map[uint64]bool{1: true, 3: true}
	entered, seen := make(chan uint64, 16), make(chan uint64, 64)
	release := make(chan struct{})
	var mu sync.Mutex
	delivered, skipped := map[uint64]int{}, map[uint64]int{}
	closed := make(chan uint64, 4)
	obs := ObserverFuncs{
		FrameFunc: func(s StreamInfo, f Frame) {
			if stuck[s.ID] {
				entered <- s.ID
				<-release
			}
			mu.Lock()
			delivered[s.ID]++
			skipped[s.ID] += f.Skipped
			mu.Unlock()
			seen <- s.ID
		},
		StreamCloseFunc: func(s StreamInfo, e StreamEnd) {
			mu.Lock()
			skipped[s.ID] += e.Skipped
			mu.Unlock()
			closed <- s.ID
		},
	}
	var workers sync.WaitGroup
	p := newObservePool(obs, &byteBudget{limit: 1 << 30}, queueBound, 2, make(chan struct{}), &workers)
	defer endPool(t, p, &workers)
	releaseAll := sync.OnceFunc(func() { close(release) })
	defer releaseAll() // on a failure, so that the workers can end

	first := p.startObservation(StreamInfo{ID: 1})
	first.frame(seqFrame(0))
	if id := <-entered; id != 1 {
		t.Fatalf("stream %d entered the stuck observer, want 1", id)
	}
	// One worker is stuck; the other observes stream 2, frame after frame.
	second := p.startObservation(StreamInfo{ID: 2})
	for seq := range uint32(3) {
		second.frame(seqFrame(seq))
		if id := <-seen; id != 2 {
			t.Fatalf("observed stream %d, want 2", id)
		}
	}
	// Stream 3 takes the second worker: every worker is stuck.
	third := p.startObservation(StreamInfo{ID: 3})
	third.frame(seqFrame(0))
	if id := <-entered; id != 3 {
		t.Fatalf("stream %d entered the stuck observer, want 3", id)
	}
	fourth := p.startObservation(StreamInfo{ID: 4})
	for seq := range uint32(queueBound + overflow) {
		fourth.frame(seqFrame(seq)) // returns at once: the relay never waits
	}
	// Both workers are in the stuck observer, so nothing can observe
	// stream 4 yet: this is no race.
	select {
	case id := <-seen:
		t.Fatalf("stream %d observed while every worker was stuck", id)
	default:
	}

	for _, o := range []*observation{first, second, third, fourth} {
		o.close(StreamEnd{By: "client"})
	}
	releaseAll()
	for range 4 {
		<-closed
	}
	mu.Lock()
	defer mu.Unlock()
	if delivered[4] != queueBound || skipped[4] != overflow {
		t.Errorf("stream 4: %d delivered and %d skipped, want the %d its queue held delivered and %d skipped", delivered[4], skipped[4], queueBound, overflow)
	}
}

// When every worker is busy and the queues hold more than helpBytes, helpers
// observe the streams waiting, and end once nothing waits: a burst of large
// frames does not wait for a worker stuck on one stream, and no goroutine
// is left once it is observed.
func TestPoolHelpersObserveABacklogAndEnd(t *testing.T) {
	leakcheck.Check(t)
	const waiting = 5
	entered, release := make(chan struct{}), make(chan struct{})
	seen := make(chan uint64, waiting)
	var running, most atomic.Int32
	obs := ObserverFuncs{FrameFunc: func(s StreamInfo, f Frame) {
		if s.ID == 0 {
			entered <- struct{}{}
			<-release
			return
		}
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		runtime.Gosched()
		running.Add(-1)
		seen <- s.ID
	}}
	var workers sync.WaitGroup
	p := newObservePool(obs, &byteBudget{limit: 1 << 40}, 8, 1, make(chan struct{}), &workers)
	defer endPool(t, p, &workers)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()

	stuck := p.startObservation(StreamInfo{ID: 0})
	stuck.frame(seqFrame(0))
	<-entered // the only worker is stuck
	var open []*observation
	for id := range uint64(waiting) {
		o := p.startObservation(StreamInfo{ID: id + 1})
		f := seqFrame(0)
		f.Size = helpBytes
		o.frame(f)
		open = append(open, o)
	}
	got := map[uint64]bool{}
	for range waiting {
		select {
		case id := <-seen:
			got[id] = true
		case <-time.After(waitTimeout):
			t.Fatalf("observed %v while the only worker was stuck, want streams 1-%d observed by helpers", got, waiting)
		}
	}
	if n, limit := most.Load(), p.maxHelpers; n > limit {
		t.Errorf("%d frames observed at once by helpers, want at most %d", n, limit)
	}
	// Nothing signals that a helper has returned after its last call, so
	// poll.
	for deadline := time.Now().Add(waitTimeout); leakcheck.Count("tap.(*observePool).runHelper") != 0; {
		if time.Now().After(deadline) {
			t.Fatal("a helper still runs after every waiting stream was observed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.helpers.Load(); n != 0 {
		t.Errorf("%d helpers counted after they ended, want 0", n)
	}
	releaseOnce()
	stuck.close(StreamEnd{By: "client"})
	for _, o := range open {
		o.close(StreamEnd{By: "client"})
	}
}

// The workers start with the first stream — a tap that relays none holds
// none — and there are as many as configured however many streams are open;
// once the streams are idle, none is running a stream's observation, and
// no stream holds a queue.
func TestPoolWorkersAreFixedAndIdleStreamsHoldNone(t *testing.T) {
	leakcheck.Check(t)
	const workerCount, streams = 3, 40
	seen := make(chan struct{}, streams)
	obs := ObserverFuncs{FrameFunc: func(StreamInfo, Frame) { seen <- struct{}{} }}
	var workers sync.WaitGroup
	p := newObservePool(obs, &byteBudget{limit: 1 << 30}, 8, workerCount, make(chan struct{}), &workers)
	if n := leakcheck.Count(workerOrigin); n != 0 {
		t.Errorf("%d workers before any stream, want 0", n)
	}
	var open []*observation
	for id := range streams {
		o := p.startObservation(StreamInfo{ID: uint64(id)})
		o.frame(seqFrame(0))
		open = append(open, o)
	}
	for range streams {
		<-seen
	}
	// Nothing signals that a worker has left a stream's code after its
	// last call, so poll.
	for deadline := time.Now().Add(waitTimeout); leakcheck.Count("tap.(*observation)") != 0; {
		if time.Now().After(deadline) {
			t.Fatal("a worker still runs a stream's observation after every frame was observed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := leakcheck.Count(workerOrigin); n != workerCount {
		t.Errorf("%d workers for %d idle streams, want %d", n, streams, workerCount)
	}
	for i, o := range open {
		o.mu.Lock()
		if cap(o.queue) != 0 || cap(o.spare) != 0 {
			t.Errorf("idle stream %d holds queue slices of capacity %d and %d, want none", i, cap(o.queue), cap(o.spare))
		}
		o.mu.Unlock()
	}
	for _, o := range open {
		o.close(StreamEnd{By: "client"})
	}
	endPool(t, p, &workers)
}

// A pool closed before any stream opened has no worker to end.
func TestPoolClosedWithoutStreams(t *testing.T) {
	leakcheck.Check(t)
	var workers sync.WaitGroup
	endPool(t, newObservePool(ObserverFuncs{}, &byteBudget{limit: 1}, 1, 2, make(chan struct{}), &workers), &workers)
}

// workerOrigin is in the stack of every worker, even one not yet started.
const workerOrigin = "created by github.com/adstap/adstap/tap.(*observePool)"

// Busy streams on every shard of the run queue take turns: a worker goes
// round the shards, so streams that always have more to tell, on the
// shards it would look at first, never keep the others waiting.
func TestPoolStreamsOfEveryShardTakeTurns(t *testing.T) {
	leakcheck.Check(t)
	const streams, turns = 2 * minShards, 6
	var (
		mu    sync.Mutex
		seen  = map[uint64]int{}
		total int
		obs   []*observation
	)
	done, ready := make(chan struct{}), make(chan struct{})
	busy := ObserverFuncs{FrameFunc: func(s StreamInfo, f Frame) {
		<-ready // every stream has its first frame queued
		mu.Lock()
		seen[s.ID]++
		total++
		n := total
		mu.Unlock()
		switch {
		case n < streams*turns:
			obs[s.ID-1].frame(seqFrame(0)) // always more to tell
		case n == streams*turns:
			close(done)
		}
	}}
	var workers sync.WaitGroup
	p := newObservePool(busy, &byteBudget{limit: 1 << 30}, 8, 1, make(chan struct{}), &workers)
	defer endPool(t, p, &workers)
	for id := range uint64(streams) {
		obs = append(obs, p.startObservation(StreamInfo{ID: id + 1}))
	}
	for _, o := range obs {
		o.frame(seqFrame(0))
	}
	close(ready)
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatal("the worker did not observe the frames")
	}
	for _, o := range obs {
		o.close(StreamEnd{By: "client"})
	}
	mu.Lock()
	defer mu.Unlock()
	for id := range uint64(streams) {
		if got := seen[id+1]; got < turns-1 {
			t.Errorf("stream %d observed %d times out of %d, want about %d each: %v", id+1, got, streams*turns, turns, seen)
		}
	}
}

// Small frames that find every worker asleep arm one timer and wake no
// worker: the worker the timer wakes observes them all. A frame of a
// foldable size wakes one at once, timer or not.
func TestPoolSmallFramesWaitForOneWake(t *testing.T) {
	leakcheck.Check(t)
	const workerCount, streams = 2, 5
	seen := make(chan int, streams+1)
	obs := ObserverFuncs{FrameFunc: func(_ StreamInfo, f Frame) { seen <- f.Size }}
	var workers sync.WaitGroup
	p := newObservePool(obs, &byteBudget{limit: 1 << 30}, 8, workerCount, make(chan struct{}), &workers)
	// The test fires the timer itself: a timer with a channel, stopped,
	// stands in for the one that calls wakeLate.
	p.soon = time.NewTimer(time.Hour)
	p.soon.Stop()
	allAsleep := func() {
		t.Helper()
		// Nothing signals that a worker went to sleep, so poll.
		for deadline := time.Now().Add(waitTimeout); p.idleCount.Load() != workerCount; {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d workers asleep, want all", p.idleCount.Load(), workerCount)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var open []*observation
	for id := range streams {
		open = append(open, p.startObservation(StreamInfo{ID: uint64(id)}))
		p.wakeLate() // the opening is a small frame too
		allAsleep()
	}

	for _, o := range open {
		o.frame(seqFrame(1))
	}
	if n := p.idleCount.Load(); n != workerCount {
		t.Errorf("%d small frames woke %d workers, want none until the timer fires", streams, workerCount-n)
	}
	if !p.soonArmed.Load() {
		t.Error("small frames did not arm the timer")
	}
	p.wakeLate()
	for range streams {
		if size := <-seen; size != 4 {
			t.Fatalf("observed a frame of %d bytes, want 4", size)
		}
	}
	allAsleep()

	// The timer is not fired again: only a wake at once has the worker
	// observe this frame.
	big := Frame{Direction: Response, Size: foldFrom, Data: mem.BufferSlice{mem.SliceBuffer(make([]byte, foldFrom))}}
	open[0].frame(big)
	select {
	case size := <-seen:
		if size != foldFrom {
			t.Errorf("observed a frame of %d bytes, want %d", size, foldFrom)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("a frame of %d bytes waited for the timer", foldFrom)
	}
	for _, o := range open {
		o.close(StreamEnd{By: "client"})
	}
	p.wakeLate()
	endPool(t, p, &workers)
}
