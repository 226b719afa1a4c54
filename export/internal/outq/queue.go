// Package outq is the one bounded queue every output of package export
// shares: work handed over without a lock and without waiting, done on a
// goroutine of the queue's own, bounded by bytes, with what is dropped
// counted and said once the output keeps up again.
package outq

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBytes bounds the work waiting for each output that does I/O (the
// capture file, stderr, /debug/config) when none is set.
const DefaultBytes = 64 << 20

// Queue runs an output's slow work — writing a file, a pipe, stderr — on a
// goroutine of its own, so whoever hands it work (the tracker's goroutine, a
// relay's) never waits for it. It holds at most maxBytes of work; work that
// does not fit is dropped and counted, and the loss is said once the output
// keeps up again.
type Queue[T any] struct {
	output   string // names the output in messages and in adstap_output_dropped_total
	maxBytes int64
	do       func(T)
	// lost is told how much work was dropped since it was last told, on the
	// queue's goroutine, once the queue has emptied after a loss.
	lost func(n uint64)
	// discard, when set, is handed the work dropped after it was queued
	// (past Close's deadline), to let go of what it holds.
	discard func(T)
	batch   Batch

	// A Put takes no lock: the producers are the relays' and the
	// observation workers' goroutines, one per stream or worker, and a
	// lock they all took would make each stream wait for the others. Work
	// is pushed on a lock-free stack that the queue's goroutine takes whole
	// and reverses, which keeps each producer's order; the bound is a byte
	// count reserved by compare-and-swap.
	head atomic.Pointer[queueNode[T]]
	// nodes holds the nodes the queue's goroutine has taken, for the next
	// puts: a node a put allocated was ~10 % of what a tap allocated
	// relaying small pushes, and so of how often it collected. Reusing a
	// node is safe on this stack: it is only pushed onto, and taken whole.
	nodes      sync.Pool
	used       atomic.Int64
	closed     atomic.Bool
	putting    atomic.Int64 // puts between their look at closed and their push
	unreported atomic.Uint64
	dropped    atomic.Uint64

	wake chan struct{}
	done chan struct{} // closed when the goroutine ends
	stop chan struct{} // closed when Close gives up waiting
}

type queued[T any] struct {
	v    T
	size int64
	// reached, when set, marks a flush: closed once everything queued
	// before it is done.
	reached chan struct{}
}

type queueNode[T any] struct {
	next *queueNode[T]
	queued[T]
}

// New starts a queue named output (its name in messages and metrics) that
// hands each piece of work to do, holding at most maxBytes of it
// (DefaultBytes when 0).
func New[T any](output string, maxBytes int64, do func(T), lost func(uint64), discard func(T)) *Queue[T] {
	return NewBatched(output, maxBytes, do, lost, discard, Batch{})
}

// Batch has a queue's goroutine gather its work: woken by work, it waits
// Linger before it takes what came, and once it has done what it took it
// calls Drained, so that an output whose work is a write (the log) makes
// one write of what it gathered rather than one a line. A steady trickle of
// small work (a log line a push, thousands of pushes a second on a tap in
// front of istiod) then costs a wake-up and a write every Linger instead of
// every line, to the tap and to whoever reads the pipe. The zero Batch does
// each piece of work as it comes.
type Batch struct {
	Linger time.Duration
	// Drained is called on the queue's goroutine after the work taken is
	// done, before the goroutine sleeps, before a Flush returns and before
	// the queue's loss is said.
	Drained func()
}

// NewBatched is New with its work gathered as b says.
func NewBatched[T any](output string, maxBytes int64, do func(T), lost func(uint64), discard func(T), b Batch) *Queue[T] {
	if maxBytes <= 0 {
		maxBytes = DefaultBytes
	}
	q := &Queue[T]{output: output, maxBytes: maxBytes, do: do, lost: lost, discard: discard, batch: b,
		wake: make(chan struct{}, 1), done: make(chan struct{}), stop: make(chan struct{})}
	go q.run()
	return q
}

// Put queues v, which holds about size bytes, unless that would pass the
// bound; it reports whether v was queued. must queues v whatever the bound:
// for small records whose loss would garble the output (a stream's open and
// close), never for the bulk of the work.
func (q *Queue[T]) Put(v T, size int, must bool) bool {
	// Counted before closed is read: close, which sets closed first, then
	// waits for putting to reach 0 before it takes the last work, so a put
	// that saw the queue open is never lost.
	q.putting.Add(1)
	if q.closed.Load() || !q.reserve(int64(size), must) {
		q.putting.Add(-1)
		q.unreported.Add(1)
		q.dropped.Add(1)
		return false
	}
	n, _ := q.nodes.Get().(*queueNode[T])
	if n == nil {
		n = new(queueNode[T])
	}
	n.queued = queued[T]{v: v, size: int64(size)}
	q.push(n)
	q.putting.Add(-1)
	q.signal()
	return true
}

// reserve counts size against the bound, unless it would pass it and the
// work need not be queued.
func (q *Queue[T]) reserve(size int64, must bool) bool {
	if must {
		q.used.Add(size)
		return true
	}
	for {
		used := q.used.Load()
		if used+size > q.maxBytes {
			return false
		}
		if q.used.CompareAndSwap(used, used+size) {
			return true
		}
	}
}

func (q *Queue[T]) push(n *queueNode[T]) {
	for {
		n.next = q.head.Load()
		if q.head.CompareAndSwap(n.next, n) {
			return
		}
	}
}

// take returns the work pushed so far, oldest first: the stack taken
// whole and its links reversed in place, so that taking work copies
// nothing and holds no batch of its own (a batch of a burst's work,
// 1,000 streams syncing at once, was half a megabyte kept or made again).
func (q *Queue[T]) take() *queueNode[T] {
	var list *queueNode[T]
	for n := q.head.Swap(nil); n != nil; {
		next := n.next
		n.next = list
		list, n = n, next
	}
	return list
}

// recycle gives back node n, its work done or dropped, for the next puts.
func (q *Queue[T]) recycle(n *queueNode[T]) {
	*n = queueNode[T]{}
	q.nodes.Put(n)
}

func (q *Queue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Flush waits, until ctx is done, for the work queued so far to be done.
func (q *Queue[T]) Flush(ctx context.Context) {
	reached := make(chan struct{})
	q.putting.Add(1)
	if q.closed.Load() {
		q.putting.Add(-1)
		return
	}
	q.push(&queueNode[T]{queued: queued[T]{reached: reached}})
	q.putting.Add(-1)
	q.signal()
	select {
	case <-reached:
	case <-ctx.Done():
	}
}

// Dropped counts the work the queue dropped, since it was made.
func (q *Queue[T]) Dropped() uint64 { return q.dropped.Load() }

func (q *Queue[T]) run() {
	defer close(q.done)
	var linger *time.Timer
	if q.batch.Linger > 0 {
		linger = time.NewTimer(q.batch.Linger)
		linger.Stop()
	}
	undrained := false
	drain := func() {
		if undrained && q.batch.Drained != nil {
			q.batch.Drained()
		}
		undrained = false
	}
	for {
		n := q.take()
		if n == nil {
			drain()
			if lost := q.unreported.Swap(0); lost > 0 && q.lost != nil {
				// Caught up after a loss: say it now, when saying it can
				// be heard.
				q.lost(lost)
				continue
			}
			if q.closed.Load() && q.putting.Load() == 0 && q.head.Load() == nil {
				return
			}
			select {
			case <-q.wake:
			case <-q.stop:
				return
			}
			if linger != nil && !q.closed.Load() {
				linger.Reset(q.batch.Linger)
				select {
				case <-linger.C:
				case <-q.stop:
					return
				}
			}
			continue
		}
		for n != nil {
			select {
			case <-q.stop:
				// What was done is finished (the log's gathered lines
				// written): Close gave up waiting, not on the work in
				// hand. The rest is dropped and counted.
				drain()
				q.dropped.Add(uint64(q.drop(n)))
				return
			default:
			}
			next := n.next
			if n.reached != nil {
				drain()
				close(n.reached)
			} else {
				q.do(n.v)
				q.used.Add(-n.size)
				undrained = true
			}
			q.recycle(n)
			n = next
		}
	}
}

// Close takes no more work and waits, until ctx is done, for the work
// queued to be done. Past ctx it stops waiting: what is left is dropped and
// counted, and the error says how much. A do call in progress is not
// interrupted; the goroutine ends once it returns.
func (q *Queue[T]) Close(ctx context.Context) error {
	select {
	case <-q.stop: // an earlier close gave up already
		return nil
	default:
	}
	q.closed.Store(true)
	q.signal()
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
	}
	select {
	case <-q.stop:
	default:
		close(q.stop)
	}
	// A put that saw the queue open pushes within a few instructions;
	// wait for it rather than lose its work uncounted.
	for q.putting.Load() != 0 {
		runtime.Gosched()
	}
	left := q.drop(q.take())
	q.dropped.Add(uint64(left))
	return fmt.Errorf("%s: %d queued records dropped: the output did not take them before the deadline", q.output, left)
}

// drop hands the work in the list from n to discard, and counts it
// (flushes aside).
func (q *Queue[T]) drop(n *queueNode[T]) int {
	count := 0
	for n != nil {
		next := n.next
		if n.reached == nil {
			count++
			if q.discard != nil {
				q.discard(n.v)
			}
		}
		q.recycle(n)
		n = next
	}
	return count
}

// WarnLost is a queue's lost function that logs the loss on log.
func WarnLost(log *slog.Logger, output, what string) func(uint64) {
	return func(n uint64) {
		log.Warn(fmt.Sprintf("%s: %d %s dropped while the output was behind", output, n, what),
			"output", output, "dropped", n, "metric", `adstap_output_dropped_total{output="`+output+`"}`)
	}
}

// MaxBytes is the queue's bound.
func (q *Queue[T]) MaxBytes() int64 { return q.maxBytes }

// Done is closed once the queue's goroutine has ended: after Close, once
// the work in hand, if any, returns.
func (q *Queue[T]) Done() <-chan struct{} { return q.done }
