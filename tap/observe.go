package tap

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// byteBudget bounds the bytes held by every observation queue of a tap
// together, so a slow observer costs a bounded amount of memory.
type byteBudget struct {
	limit int64
	used  atomic.Int64
}

func (b *byteBudget) take(n int) bool {
	if b.used.Add(int64(n)) > b.limit {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

func (b *byteBudget) give(n int) { b.used.Add(-int64(n)) }

// observation hands one stream's frames to the observer, so the relay only
// ever appends to a bounded queue. Frames that do not fit are relayed anyway
// and counted as skipped. A worker goroutine drains the queue while it has
// frames and ends when it is empty; the next frame starts another. An idle
// stream (most streams, most of the time) thus holds no goroutine, and no
// stack grown by the observer's work, for its observation.
type observation struct {
	obs       Observer
	info      StreamInfo
	budget    *byteBudget
	maxFrames int
	workers   *sync.WaitGroup
	abandon   <-chan struct{} // closed: drop what is queued, counted as skipped

	mu      sync.Mutex
	queue   []Frame
	end     *StreamEnd
	skipped int
	// draining is set while a worker runs; only one runs at a time, so the
	// observer's calls for the stream never overlap and keep their order.
	draining bool
	// spare is the worker's batch, kept between workers for its capacity.
	spare []Frame
}

func startObservation(obs Observer, info StreamInfo, budget *byteBudget, maxFrames int, abandon <-chan struct{}, wg *sync.WaitGroup) *observation {
	o := &observation{obs: obs, info: info, budget: budget, maxFrames: maxFrames, workers: wg, abandon: abandon, draining: true}
	wg.Add(1)
	go func() {
		defer wg.Done()
		o.obs.OnStreamOpen(o.info)
		o.drain()
	}()
	return o
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
	if len(o.queue) >= o.maxFrames || !o.budget.take(f.Size) {
		o.skipped++
		o.mu.Unlock()
		return true
	}
	f.Skipped, o.skipped = o.skipped, 0
	f.Data.Ref()
	o.queue = append(o.queue, f)
	start := o.wake()
	o.mu.Unlock()
	start()
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
	start := o.wake()
	o.mu.Unlock()
	start()
}

// wake, called with mu held, marks the queue as being drained and returns
// what starts a worker when none is running; the caller calls it after
// unlocking.
func (o *observation) wake() func() {
	if o.draining {
		return func() {}
	}
	o.draining = true
	o.workers.Add(1)
	return func() {
		go func() {
			defer o.workers.Done()
			o.drain()
		}()
	}
}

// drain hands the queued frames to the observer until the queue is empty,
// then ends; after the stream's end it tells the observer and ends for good.
//
// It first yields: a goroutine just started runs next on its processor,
// ahead of the relay's goroutines that are ready (the writers that put the
// frame on the wire, the readers of other streams). When the cores are busy
// — a push to a thousand streams at once — the frames go out first and are
// observed right after, rather than observation stretching the push.
func (o *observation) drain() {
	runtime.Gosched()
	for {
		o.mu.Lock()
		batch := o.queue
		o.queue = o.spare[:0]
		end := o.end
		if len(batch) == 0 && end == nil {
			o.spare = batch
			o.draining = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		abandoned := 0
		for i := range batch {
			select {
			case <-o.abandon:
				abandoned += 1 + batch[i].Skipped
			default:
				o.obs.OnFrame(o.info, batch[i])
			}
			batch[i].Data.Free()
			o.budget.give(batch[i].Size)
			batch[i] = Frame{}
		}
		if abandoned > 0 {
			o.mu.Lock()
			if o.end != nil {
				o.end.Skipped += abandoned // end, if this batch was the last
			} else {
				o.skipped += abandoned
			}
			o.mu.Unlock()
		}
		if end != nil {
			// No frame is queued once the end is set, so this batch was
			// the last; draining stays set, so no worker starts again.
			o.obs.OnStreamClose(o.info, *end)
			return
		}
		o.mu.Lock()
		o.spare = batch[:0]
		o.mu.Unlock()
	}
}
