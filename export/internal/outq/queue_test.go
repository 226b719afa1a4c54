package outq

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// The bound is in bytes, counted from the put until the work is done: what
// does not fit is dropped and counted, what must be queued is, whatever the
// bound.
func TestPutKeepsTheBound(t *testing.T) {
	leakcheck.Check(t)
	gate := make(chan struct{})
	q := New("test", 100, func(int) { <-gate }, nil, nil)
	defer q.Close(context.Background())
	defer close(gate)
	for i, tc := range []struct {
		size int
		must bool
		want bool
	}{
		{60, false, true},
		{50, false, false}, // 110 > 100
		{40, false, true},  // 100
		{1, false, false},
		{50, true, true}, // must: 150
		{0, false, false},
	} {
		if got := q.Put(i, tc.size, tc.must); got != tc.want {
			t.Errorf("put %d (%d bytes, must %v) = %v, want %v", i, tc.size, tc.must, got, tc.want)
		}
	}
	if got, want := q.Dropped(), uint64(3); got != want {
		t.Errorf("Dropped() = %d, want %d", got, want)
	}
}

// Producers on goroutines of their own, at once: each one's work is done
// in the order it was put, and none is lost.
func TestPutKeepsEachProducersOrder(t *testing.T) {
	leakcheck.Check(t)
	const producers, each = 4, 2000
	type item struct{ producer, i int }
	last := make([]int, producers)
	for i := range last {
		last[i] = -1
	}
	var done int
	var bad []string
	q := New("test", 1<<30, func(it item) {
		if it.i != last[it.producer]+1 {
			bad = append(bad, "out of order")
		}
		last[it.producer] = it.i
		done++
	}, nil, nil)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range each {
				q.Put(item{p, i}, 8, false)
			}
		})
	}
	wg.Wait()
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if done != producers*each || len(bad) > 0 {
		t.Errorf("%d done, want %d; %d out of order", done, producers*each, len(bad))
	}
}

// Flush waits for what was queued before it; a loss is said once the queue
// has caught up, with how much was lost.
func TestFlushAndLost(t *testing.T) {
	leakcheck.Check(t)
	gate := make(chan struct{})
	var did []int
	lost := make(chan uint64, 1)
	q := New("test", 10, func(i int) {
		<-gate
		did = append(did, i)
	}, func(n uint64) { lost <- n }, nil)
	defer q.Close(context.Background())
	q.Put(1, 10, false)
	q.Put(2, 10, false) // dropped
	q.Put(3, 10, false) // dropped
	close(gate)
	q.Flush(context.Background())
	if len(did) != 1 || did[0] != 1 {
		t.Errorf("done before the flush: %v, want [1]", did)
	}
	if got := <-lost; got != 2 {
		t.Errorf("lost told %d, want 2", got)
	}
}

// Past Close's deadline the rest is handed to discard, counted, and said in
// the error.
func TestCloseGivesUpAtTheDeadline(t *testing.T) {
	leakcheck.Check(t)
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	var discarded []int
	q := New("test", 1<<20, func(int) {
		started <- struct{}{}
		<-gate
	}, nil, func(i int) { discarded = append(discarded, i) })
	q.Put(0, 1, false)
	<-started // 0 is in hand; 1 and 2 wait
	q.Put(1, 1, false)
	q.Put(2, 1, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := q.Close(ctx)
	close(gate)
	<-q.Done()
	if err == nil || !strings.Contains(err.Error(), "test: 2 queued records dropped") {
		t.Errorf("Close = %v, want the 2 records it dropped", err)
	}
	if len(discarded) != 2 || q.Dropped() != 2 {
		t.Errorf("discarded %v, Dropped() = %d; want 2 of each", discarded, q.Dropped())
	}
	if q.Put(3, 1, true) {
		t.Error("a put after Close was queued")
	}
}

// BenchmarkPut is a put of work the size of a reference-check op, done by
// the queue's goroutine: the nodes the goroutine has taken serve the next
// puts, so a put allocates nothing once the queue runs.
func BenchmarkPut(b *testing.B) {
	type work struct{ _ [448]byte }
	done := make(chan struct{}, 1)
	q := New("bench", 1<<30, func(work) {
		select {
		case done <- struct{}{}:
		default:
		}
	}, nil, nil)
	defer q.Close(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		q.Put(work{}, 448, false)
		<-done
	}
}

// A batched queue calls Drained once it has done all the work it could
// take: the work that came while it was busy is drained together, and a
// Flush returns only once what came before it is drained.
func TestBatchDrainsWhatCameWhileBusy(t *testing.T) {
	leakcheck.Check(t)
	started, gate := make(chan struct{}), make(chan struct{})
	var done int
	var drains []int
	q := NewBatched("test", 1<<20, func(i int) {
		if i == 0 {
			close(started)
			<-gate
		}
		done++
	}, nil, nil, Batch{Linger: time.Millisecond, Drained: func() { drains = append(drains, done) }})
	defer q.Close(context.Background())
	q.Put(0, 1, false)
	<-started
	for i := 1; i <= 5; i++ {
		q.Put(i, 1, false)
	}
	close(gate)
	q.Flush(context.Background())
	if want := []int{6}; !slices.Equal(drains, want) {
		t.Errorf("Drained after %v pieces of work, want %v: the work that came while the first was done is one batch", drains, want)
	}
	q.Put(6, 1, false)
	q.Flush(context.Background())
	if want := []int{6, 7}; !slices.Equal(drains, want) {
		t.Errorf("Drained after %v pieces of work, want %v", drains, want)
	}
}

// When Close gives up while the goroutine is busy, the goroutine still
// finishes what it has done (a batched queue's Drained: the log's gathered
// lines written) and counts the work it had taken but not done as dropped.
func TestCloseGivingUpDrainsTheWorkDone(t *testing.T) {
	leakcheck.Check(t)
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	started := make(chan int, 3)
	var calls []string // the queue's goroutine's alone until Done
	q := NewBatched("test", 1<<20, func(i int) {
		started <- i
		if i < len(gates) {
			<-gates[i]
		}
		calls = append(calls, fmt.Sprint("do ", i))
	}, nil, nil, Batch{Drained: func() { calls = append(calls, "drained") }})
	q.Put(0, 1, false)
	<-started // 0 in hand; 1 and 2 wait, to be taken together
	q.Put(1, 1, false)
	q.Put(2, 1, false)
	close(gates[0])
	if i := <-started; i != 1 {
		t.Fatalf("work %d started, want 1", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q.Close(ctx) // gives up at once: 1 is in hand, 2 taken with it
	close(gates[1])
	<-q.Done()
	if want := []string{"do 0", "do 1", "drained"}; !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v: the work done before the goroutine saw Close give up is drained", calls, want)
	}
	if got := q.Dropped(); got != 1 {
		t.Errorf("Dropped() = %d, want 1: the work taken but not done", got)
	}
}
