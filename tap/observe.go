package tap

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/mem"
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
	// Folded counts the frames held, while they waited, as bytes shared
	// with frames sent to other streams (see folder).
	Folded uint64
}

// observePool runs the observer for every stream of a tap on a few
// long-lived goroutines, its workers. A stream with something to tell the
// observer (its opening, frames, its end) waits on a run queue — once,
// however many frames it has queued. A worker takes a stream, tells the
// observer what the stream had queued at that moment, and puts the stream
// back at the tail if more came meanwhile. So:
//
//   - a stream is with one worker at a time: the observer's calls for it keep
//     their order and never overlap;
//   - an idle stream holds no goroutine, and a push to a thousand streams is
//     observed by the same few goroutines, whose stacks have grown already,
//     rather than by a thousand new ones whose stacks grow again;
//   - the run queues hold at most one entry per stream (they are linked
//     through the streams themselves), so the relay appends to them without
//     ever waiting for room;
//   - the streams take turns, so a busy stream delays the others by one
//     batch at a time, not by its whole backlog;
//   - while the queues grow past what the workers keep up with, helpers
//     join them (help), and end once the run queue is empty.
//
// The run queue is sharded, so that no lock is taken by every stream's
// frames: each stream is queued on a shard of its own (given when it
// opens), whose lock only the streams of that shard share, for the moment
// of linking or unlinking one. Each worker goes round the shards in turn,
// taking the stream at the head of the next one that has any, so the
// streams of every shard take turns with the others', and a worker stuck on
// one stream strands no shard. Idle workers sleep on a channel each, and
// the relay wakes one only when some worker says it is idle.
//
// The price: an observer stuck on one stream holds a worker, and with every
// worker stuck no stream is observed until one returns. The relay goes on
// meanwhile, and the frames past the queues' bounds are skipped and counted,
// as with any observer that falls behind.
type observePool struct {
	obs       Observer
	budget    *byteBudget
	folder    *folder
	maxFrames int
	size      int
	abandon   <-chan struct{} // closed: drop what is queued, counted as skipped
	workers   *sync.WaitGroup

	start     sync.Once
	shards    []runShard
	nextShard atomic.Uint32 // the shard of the next stream to open

	// idle[i] is set while worker i sleeps on wake[i] (or is about to);
	// whoever clears it sends the one token that wakes it.
	idle      []atomic.Bool
	wake      []chan struct{}
	idleCount atomic.Int32
	nextWake  atomic.Uint32 // where the search for an idle worker starts
	// soon wakes a worker wakeDelay after a small frame found them asleep
	// (see wakeDelay); soonArmed is set while it is armed.
	soon      *time.Timer
	soonArmed atomic.Bool

	// closing is set once no stream can open any more (Shutdown, after
	// every handler returned); the workers end when every stream's end has
	// been told (open is 0).
	closing atomic.Bool
	open    atomic.Int64 // streams whose OnStreamClose has not returned

	// helpers counts the helpers running (see help); maxHelpers bounds them.
	helpers    atomic.Int32
	maxHelpers int32
}

// helpBytes is how much the queues hold, for each helper running, before
// the relay starts one more (see help).
const helpBytes = 1 << 20

// runShard is one shard of the run queue, linked through
// observation.next; its lock is held only to link or unlink a stream.
type runShard struct {
	mu         sync.Mutex
	head, tail *observation
	queued     atomic.Int32 // streams on it, read without the lock
	_          [32]byte     // keeps shards off each other's cache lines
}

// minShards is the fewest run-queue shards: with one or two workers, the
// streams still spread over several locks.
const minShards = 8

func newObservePool(obs Observer, budget *byteBudget, maxFrames, size int, abandon <-chan struct{}, workers *sync.WaitGroup) *observePool {
	p := &observePool{obs: obs, budget: budget, folder: newFolder(), maxFrames: maxFrames, size: size, abandon: abandon, workers: workers,
		shards: make([]runShard, max(size, minShards)), idle: make([]atomic.Bool, size), wake: make([]chan struct{}, size)}
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
	}
	p.soon = time.AfterFunc(time.Hour, p.wakeLate)
	p.soon.Stop()
	p.maxHelpers = int32(helpersPerWorker * size)
	return p
}

// startObservation queues the opening of a stream for the observer; the
// first stream starts the workers, so a tap that never relays a stream
// holds none.
func (p *observePool) startObservation(info StreamInfo) *observation {
	p.start.Do(func() {
		p.workers.Add(p.size)
		for i := range p.size {
			go p.run(i)
		}
	})
	o := &observation{pool: p, info: info, scheduled: true}
	o.shard = &p.shards[(p.nextShard.Add(1)-1)%uint32(len(p.shards))]
	p.open.Add(1)
	p.schedule(o)
	return o
}

// schedule puts a stream that has something to tell the observer on its
// shard of the run queue, and wakes a worker if one sleeps. The caller has
// just marked it scheduled, so it is on a queue at most once and with no
// worker.
func (p *observePool) schedule(o *observation) {
	p.enqueue(o)
	if p.idleCount.Load() > 0 {
		if p.budget.used.Load()+p.budget.large.Load() >= foldFrom {
			p.wakeOne()
		} else if p.soonArmed.CompareAndSwap(false, true) {
			p.soon.Reset(wakeDelay)
		}
		return
	}
	p.help()
}

// wakeDelay is how long small frames wait for a sleeping worker.
//
// Waking a worker for every frame costs more than observing the frame: a
// thread of the process's woken on another core, in the moments the relay
// and its peers need the cores, for a ~20 µs observation, and put to sleep
// again. Where small pushes and their ACKs arrive spread out (EDS updates
// across a mesh, a frame every quarter of a millisecond or so), that is a
// wake per frame, and the relay's added latency rose with it. So while the
// queues hold less than a foldable frame's size, the first frame arms one
// timer and the worker it wakes observes every frame that came meanwhile;
// larger frames wake one at once, since a frame that waits holds gRPC's
// buffers (see help). The observation is later by at most wakeDelay; the
// relay is not.
const wakeDelay = 2 * time.Millisecond

// wakeLate wakes a worker for the small frames queued since the timer was
// armed.
func (p *observePool) wakeLate() {
	p.soonArmed.Store(false)
	p.wakeOne()
}

// helpersPerWorker bounds the helpers: at most this many for each worker.
const helpersPerWorker = 8

// help starts a helper when every worker is busy and the queues hold more
// than helpBytes for each helper already running, up to maxHelpers. A
// helper observes the streams on the run queue as a worker does, and ends
// as soon as the run queue is empty.
//
// Holding a frame for the observer is what costs, not observing it: a
// frame's buffers are gRPC's, which its pool cannot hand out again while
// they are held, so a burst the workers fall behind on (a full push to a
// thousand streams) makes gRPC take fresh memory for every frame after,
// and fresh memory costs the page faults of its first touch, which cost
// more than the decode where faults are dear (the observation reads a
// 212 KB push in ~50 µs; its 53 pages took ~0.7 ms to fault in on the VM
// the benchmarks ran on, docs/performance.md). And the workers fall behind
// not for want of a core but of a turn: in a burst the relay's goroutines,
// thousands of them runnable, are ahead of the few workers on the run
// queues, and Go's scheduler has no priorities. More goroutines observing
// take more turns, and so the observation keeps up with what arrives.
// Only while the queues grow, though: when idle, none is held.
func (p *observePool) help() {
	n := p.helpers.Load()
	if n >= p.maxHelpers || p.budget.used.Load()+p.budget.large.Load() <= int64(n+1)*helpBytes {
		return
	}
	if !p.helpers.CompareAndSwap(n, n+1) {
		return // another relay goroutine started one just now
	}
	p.workers.Add(1)
	go p.runHelper(int(p.nextShard.Load()))
}

// runHelper observes the streams on the run queue until it is empty.
func (p *observePool) runHelper(cursor int) {
	defer p.workers.Done()
	defer p.helpers.Add(-1)
	for {
		o := p.take(&cursor)
		if o == nil {
			return
		}
		if o.observe() {
			p.enqueue(o)
		}
	}
}

// enqueue links o at the tail of its shard.
func (p *observePool) enqueue(o *observation) {
	sh := o.shard
	sh.mu.Lock()
	if sh.tail == nil {
		sh.head = o
	} else {
		sh.tail.next = o
	}
	sh.tail = o
	sh.queued.Add(1)
	sh.mu.Unlock()
}

// wakeOne wakes a sleeping worker, if there is one.
func (p *observePool) wakeOne() {
	first := int(p.nextWake.Add(1))
	for k := range p.size {
		if i := (first + k) % p.size; p.idle[i].CompareAndSwap(true, false) {
			p.idleCount.Add(-1)
			p.wake[i] <- struct{}{}
			return
		}
	}
}

// wakeAll wakes every sleeping worker, to see that the pool is closing.
func (p *observePool) wakeAll() {
	for i := range p.size {
		if p.idle[i].CompareAndSwap(true, false) {
			p.idleCount.Add(-1)
			p.wake[i] <- struct{}{}
		}
	}
}

// take unlinks the stream at the head of a shard, looking at the shards in
// turn from *cursor, which it leaves after the shard it took from: each
// worker goes round the shards, so the streams of every shard take turns
// with the others'. nil when every shard is empty.
func (p *observePool) take(cursor *int) *observation {
	n := len(p.shards)
	for k := range n {
		at := (*cursor + k) % n
		sh := &p.shards[at]
		if sh.queued.Load() == 0 {
			continue
		}
		sh.mu.Lock()
		o := sh.head
		if o != nil {
			sh.head, o.next = o.next, nil
			if sh.head == nil {
				sh.tail = nil
			}
			sh.queued.Add(-1)
		}
		sh.mu.Unlock()
		if o != nil {
			*cursor = at + 1
			return o
		}
	}
	return nil
}

// ended reports whether the workers are to end: the pool is closing and
// every stream's end has been told.
func (p *observePool) ended() bool { return p.closing.Load() && p.open.Load() == 0 }

// close tells the workers that no stream will open any more: they end once
// the streams still open have ended and been told so.
func (p *observePool) close() {
	p.closing.Store(true)
	p.wakeAll()
}

// run is worker i: it observes the streams on the run queue in turn until
// the pool closes and every stream's end has been told.
func (p *observePool) run(i int) {
	defer p.workers.Done()
	cursor := i // the workers start apart
	for {
		o := p.next(i, &cursor)
		if o == nil {
			return
		}
		if o.observe() {
			// More came meanwhile: back at the tail of its shard, so the
			// others go first. No one needs waking: this worker is awake
			// to take it.
			p.enqueue(o)
		}
	}
}

// next returns the stream for worker i to observe, sleeping until there is
// one; nil when the worker is to end.
func (p *observePool) next(i int, cursor *int) *observation {
	for {
		if o := p.take(cursor); o != nil {
			return o
		}
		if p.ended() {
			return nil
		}
		// Say it is idle, then look again: a stream queued before the
		// relay could see this worker idle is found here, one queued after
		// it wakes this worker (or another).
		p.idle[i].Store(true)
		p.idleCount.Add(1)
		o := p.take(cursor)
		if o != nil || p.ended() {
			if p.idle[i].CompareAndSwap(true, false) {
				p.idleCount.Add(-1)
			} else {
				<-p.wake[i] // someone woke it meanwhile: take the token
			}
			if o == nil {
				return nil
			}
			return o
		}
		<-p.wake[i]
	}
}

// streamClosed counts a stream's end as told, and lets the workers end if
// it was the last one of a closing pool.
func (p *observePool) streamClosed() {
	if p.open.Add(-1) == 0 && p.closing.Load() {
		p.wakeAll()
	}
}

// observation is one stream's queue of frames for the observer, so the relay
// only ever appends to a bounded queue. Frames that do not fit are relayed
// anyway and counted as skipped. The pool's workers drain it.
type observation struct {
	pool *observePool
	info StreamInfo
	// shard is the run queue's shard the stream waits on; next links it,
	// guarded by the shard's mu.
	shard *runShard
	next  *observation
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
	// spare is the previous batch, kept for its capacity while the stream
	// stays busy.
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
	f.held = f.Size
	f.Data.Ref()
	o.queue = append(o.queue, f)
	schedule := o.markScheduled()
	o.mu.Unlock()
	if schedule {
		o.pool.schedule(o)
	}
	return true
}

// foldable reports whether data, just forwarded, is worth folding (see
// folder): a frame of a size worth it, under the queues' bound, that waits
// for the observer still.
func (o *observation) foldable(data mem.BufferSlice) bool {
	n := data.Len()
	if !foldable(n) || int64(n) > o.pool.budget.limit {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.waiting(data) >= 0
}

// fold, on the relay's goroutine once it has forwarded data, has the queue
// hold data's bytes folded into those of frames seen before, if data
// repeats one and still waits, and lets go of data's own buffers.
func (o *observation) fold(data mem.BufferSlice) {
	folded, own, ok := o.pool.folder.fold(data)
	if !ok {
		return
	}
	o.mu.Lock()
	i := o.waiting(data)
	if i < 0 {
		o.mu.Unlock() // the observer has it already
		return
	}
	f := &o.queue[i]
	o.pool.budget.give(f.held - own)
	f.held, f.Data = own, folded
	o.mu.Unlock()
	data.Free()
}

// waiting, with mu held, is where data waits on the queue, or -1.
func (o *observation) waiting(data mem.BufferSlice) int {
	for i := len(o.queue) - 1; i >= 0; i-- {
		if q := o.queue[i].Data; len(q) > 0 && &q[0] == &data[0] {
			return i
		}
	}
	return -1
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
		o.info.Header = nil
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
		p.budget.give(batch[i].held)
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
	if len(o.queue) == 0 && o.end == nil {
		// Idle: a stream waits most of its life for its next push, and
		// holds no slice meanwhile; its next frame costs one small one.
		o.queue = nil
		o.scheduled = false
		return false
	}
	o.spare = batch[:0]
	return true
}
