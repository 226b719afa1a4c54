package tap

import (
	"sync"
	"sync/atomic"
)

// byteBudget bounds the bytes held by every observation queue of a tap
// together, so a slow observer costs a bounded amount of memory.
//
// A frame larger than the whole bound is held apart, one at a time: it is
// taken when no other such frame is held, whatever the queues hold within
// the bound. Its buffers are the ones the relay received it in and holds
// while it forwards it, so observing it adds no copy; it only keeps them
// until it is observed. Without this, a push larger than
// --observe-queue-bytes (the injection template's 64 MiB) would never be
// observed, tracked or captured, however idle the tap; and its ACK, a few
// hundred bytes arriving while it is observed, still fits within the
// bound. So the queues hold at most the bound plus one frame larger than
// it; overBound counts the frames taken so.
type byteBudget struct {
	limit     int64
	used      atomic.Int64 // by frames within the bound
	large     atomic.Int64 // the size of the frame over the bound held, if any
	overBound atomic.Uint64
}

func (b *byteBudget) take(n int) bool {
	if int64(n) > b.limit {
		if !b.large.CompareAndSwap(0, int64(n)) {
			return false
		}
		b.overBound.Add(1)
		return true
	}
	if b.used.Add(int64(n)) > b.limit {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

func (b *byteBudget) give(n int) {
	if int64(n) > b.limit {
		b.large.Store(0)
		return
	}
	b.used.Add(-int64(n))
}

// ObserveQueue is what the observation queues hold.
type ObserveQueue struct {
	Bytes int64 // held now, over every stream
	// OverBound counts the frames larger than Config.ObserveQueueBytes
	// queued, one at a time, beside what the bound holds (see Config).
	OverBound uint64
}

// ObserveQueue reports what the observation queues hold now, and how many
// frames over their bound they took.
func (s *Server) ObserveQueue() ObserveQueue {
	return ObserveQueue{Bytes: s.budget.used.Load() + s.budget.large.Load(), OverBound: s.budget.overBound.Load()}
}

// observePool runs the observer for every stream of a tap on a few
// long-lived goroutines, its workers. A stream with something to tell the
// observer (its opening, frames, its end) waits on the pool's run queue —
// once, however many frames it has queued. A worker takes the stream at the
// head, tells the observer what the stream had queued at that moment, and
// puts the stream back at the tail if more came meanwhile. So:
//
//   - a stream is with one worker at a time: the observer's calls for it keep
//     their order and never overlap;
//   - an idle stream holds no goroutine, and a push to a thousand streams is
//     observed by the same few goroutines, whose stacks have grown already,
//     rather than by a thousand new ones whose stacks grow again;
//   - the run queue holds at most one entry per stream (it is linked through
//     the streams themselves), so the relay appends to it without ever
//     waiting for room;
//   - the streams take turns, so a busy stream delays the others by one
//     batch at a time, not by its whole backlog.
//
// The price: an observer stuck on one stream holds a worker, and with every
// worker stuck no stream is observed until one returns. The relay goes on
// meanwhile, and the frames past the queues' bounds are skipped and counted,
// as with any observer that falls behind.
type observePool struct {
	obs       Observer
	budget    *byteBudget
	maxFrames int
	size      int
	abandon   <-chan struct{} // closed: drop what is queued, counted as skipped
	workers   *sync.WaitGroup

	mu         sync.Mutex
	work       sync.Cond    // on mu: a stream was queued, or the pool may end
	head, tail *observation // the run queue, linked through observation.next
	idle       int          // workers waiting on work
	started    bool
	// closing is set once no stream can open any more (Shutdown, after
	// every handler returned); the workers end when every stream's end has
	// been told.
	closing bool
	open    int // streams whose OnStreamClose has not returned
}

func newObservePool(obs Observer, budget *byteBudget, maxFrames, size int, abandon <-chan struct{}, workers *sync.WaitGroup) *observePool {
	p := &observePool{obs: obs, budget: budget, maxFrames: maxFrames, size: size, abandon: abandon, workers: workers}
	p.work.L = &p.mu
	return p
}

// startObservation queues the opening of a stream for the observer; the
// first stream starts the workers, so a tap that never relays a stream
// holds none.
func (p *observePool) startObservation(info StreamInfo) *observation {
	o := &observation{pool: p, info: info, scheduled: true}
	p.mu.Lock()
	if !p.started {
		p.started = true
		p.workers.Add(p.size)
		for range p.size {
			go p.run()
		}
	}
	p.open++
	p.push(o)
	wake := p.idle > 0
	p.mu.Unlock()
	if wake {
		p.work.Signal()
	}
	return o
}

// schedule puts a stream that has something to tell the observer on the run
// queue. The caller has just marked it scheduled, so it is on the queue at
// most once and with no worker.
func (p *observePool) schedule(o *observation) {
	p.mu.Lock()
	p.push(o)
	wake := p.idle > 0
	p.mu.Unlock()
	if wake {
		p.work.Signal()
	}
}

// push appends o to the run queue; mu is held.
func (p *observePool) push(o *observation) {
	if p.tail == nil {
		p.head = o
	} else {
		p.tail.next = o
	}
	p.tail = o
}

// close tells the workers that no stream will open any more: they end once
// the streams still open have ended and been told so.
func (p *observePool) close() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.work.Broadcast()
}

// run is a worker: it observes the streams on the run queue in turn until
// the pool closes and every stream's end has been told.
func (p *observePool) run() {
	defer p.workers.Done()
	var o *observation
	again := false
	for {
		if o = p.next(o, again); o == nil {
			return
		}
		again = o.observe()
	}
}

// next puts the stream the worker just observed back on the run queue if it
// has more (at the tail: the others go first), and returns the stream to
// observe next, waiting for one; nil when the worker is to end. A stream
// put back needs no wake-up: this worker is awake to take it.
func (p *observePool) next(done *observation, again bool) *observation {
	p.mu.Lock()
	defer p.mu.Unlock()
	if done != nil && again {
		p.push(done)
	}
	for p.head == nil {
		if p.closing && p.open == 0 {
			return nil
		}
		p.idle++
		p.work.Wait()
		p.idle--
	}
	o := p.head
	p.head, o.next = o.next, nil
	if p.head == nil {
		p.tail = nil
	}
	return o
}

// streamClosed counts a stream's end as told, and lets the workers end if
// it was the last one of a closing pool.
func (p *observePool) streamClosed() {
	p.mu.Lock()
	p.open--
	last := p.closing && p.open == 0
	p.mu.Unlock()
	if last {
		p.work.Broadcast()
	}
}

// observation is one stream's queue of frames for the observer, so the relay
// only ever appends to a bounded queue. Frames that do not fit are relayed
// anyway and counted as skipped. The pool's workers drain it.
type observation struct {
	pool *observePool
	info StreamInfo
	// next links the pool's run queue; guarded by the pool's mu.
	next *observation
	// opened is set once OnStreamOpen was told; only the worker that holds
	// the stream touches it.
	opened bool

	mu      sync.Mutex
	queue   []Frame
	end     *StreamEnd
	skipped int
	// scheduled is set while the stream is on the run queue or with a
	// worker: it is never on the queue twice, nor with two workers.
	scheduled bool
	// spare is the previous batch, kept for its capacity.
	spare []Frame
}

// frame queues f for the observer, or counts it as skipped when the queue
// is full. It takes its own reference to f.Data, so the caller may hand the
// frame on right after. It returns false once the stream's end is queued:
// the stream is over, and the frame goes nowhere.
func (o *observation) frame(f Frame) bool {
	o.mu.Lock()
	if o.end != nil {
		o.mu.Unlock()
		return false
	}
	if len(o.queue) >= o.pool.maxFrames || !o.pool.budget.take(f.Size) {
		o.skipped++
		o.mu.Unlock()
		return true
	}
	f.Skipped, o.skipped = o.skipped, 0
	f.Data.Ref()
	o.queue = append(o.queue, f)
	schedule := o.markScheduled()
	o.mu.Unlock()
	if schedule {
		o.pool.schedule(o)
	}
	return true
}

// close queues the end of the stream; frames queued after it are ignored.
func (o *observation) close(e StreamEnd) {
	o.mu.Lock()
	if o.end != nil {
		o.mu.Unlock()
		return
	}
	e.Skipped, o.skipped = o.skipped, 0
	o.end = &e
	schedule := o.markScheduled()
	o.mu.Unlock()
	if schedule {
		o.pool.schedule(o)
	}
}

// markScheduled, called with mu held, reports whether the stream must be put
// on the run queue: it is not there yet, nor with a worker.
func (o *observation) markScheduled() bool {
	if o.scheduled {
		return false
	}
	o.scheduled = true
	return true
}

// observe, on a worker, tells the observer what the stream has queued: its
// opening, the first time; the frames queued now; its end, if it came
// before them. It reports whether the stream has more to tell, which it
// then keeps scheduled.
func (o *observation) observe() (again bool) {
	p := o.pool
	if !o.opened {
		o.opened = true
		p.obs.OnStreamOpen(o.info)
	}
	o.mu.Lock()
	batch := o.queue
	o.queue = o.spare[:0]
	o.spare = nil
	end := o.end
	o.mu.Unlock()
	abandoned := 0
	for i := range batch {
		select {
		case <-p.abandon:
			abandoned += 1 + batch[i].Skipped
		default:
			p.obs.OnFrame(o.info, batch[i])
		}
		batch[i].Data.Free()
		p.budget.give(batch[i].Size)
		batch[i] = Frame{}
	}
	if end != nil {
		// No frame is queued once the end is set, so this batch was the
		// last; scheduled stays set, so the stream is never queued again.
		e := *end
		e.Skipped += abandoned
		p.obs.OnStreamClose(o.info, e)
		p.streamClosed()
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if abandoned > 0 {
		if o.end != nil {
			o.end.Skipped += abandoned // the end came after this batch
		} else {
			o.skipped += abandoned
		}
	}
	o.spare = batch[:0]
	if len(o.queue) == 0 && o.end == nil {
		o.scheduled = false
		return false
	}
	return true
}
