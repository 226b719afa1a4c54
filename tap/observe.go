package tap

import (
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

// observation hands one stream's frames to the observer from a goroutine of
// its own, so the relay only ever appends to a bounded queue. Frames that do
// not fit are relayed anyway and counted as skipped.
type observation struct {
	obs       Observer
	info      StreamInfo
	budget    *byteBudget
	maxFrames int
	abandon   <-chan struct{} // closed: drop what is queued, counted as skipped

	mu      sync.Mutex
	queue   []Frame
	end     *StreamEnd
	skipped int

	wake chan struct{}
}

func startObservation(obs Observer, info StreamInfo, budget *byteBudget, maxFrames int, abandon <-chan struct{}, wg *sync.WaitGroup) *observation {
	o := &observation{obs: obs, info: info, budget: budget, maxFrames: maxFrames, abandon: abandon, wake: make(chan struct{}, 1)}
	wg.Add(1)
	go func() {
		defer wg.Done()
		o.run()
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
	o.mu.Unlock()
	o.signal()
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
	o.mu.Unlock()
	o.signal()
}

func (o *observation) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

func (o *observation) run() {
	o.obs.OnStreamOpen(o.info)
	var batch []Frame
	for range o.wake {
		o.mu.Lock()
		batch, o.queue = o.queue, batch[:0]
		end := o.end
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
			// No frame is queued once the end is set, so this batch was the last.
			o.obs.OnStreamClose(o.info, *end)
			return
		}
	}
}
