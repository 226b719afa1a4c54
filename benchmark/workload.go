package benchmark

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Workload is one kind of xDS traffic, built once and run over each path.
type Workload interface {
	ID() string       // W1 … W7
	Describe() string // what it sends, for the report
	// Run starts an upstream, the path's middle (start) in front of it and
	// the clients, measures one run, and checks that every push arrived
	// intact and every ACK was counted.
	Run(ctx context.Context, start StartMiddle) (Result, error)
}

// PathsOf are the paths w runs over: its own (W7's), or StandardPaths.
func PathsOf(w Workload) []Path {
	if o, ok := w.(interface{ Paths() []Path }); ok {
		return o.Paths()
	}
	return standardPaths
}

// Result is one run of a workload over one path.
type Result struct {
	Wall    time.Duration // the measured phase, as the clients saw it
	Middle  Window        // what the middle used during it (zero for direct)
	Pushes  int           // pushes in the measured phase, each checked
	ACKs    int           // ACKs the upstream received, in all
	Bytes   int64         // bytes of pushes in the measured phase
	Streams int

	// Latencies (W2) are the times from the upstream sending a push to it
	// receiving the client's ACK, over the measured phase.
	Latencies []time.Duration
	// Idle (W3) is the middle with no stream, before the clients came;
	// Settled is the middle with every stream synced, then idle for a
	// while; Collected is the same right after a forced garbage collection
	// that returned the freed memory to the OS: the live part of Settled.
	Idle, Settled, Collected Usage
	// Footprints (W7) are the middle's memory around each push.
	Footprints []Footprint
}

// Sizes are the dimensions of the workloads.
type Sizes struct {
	W1Clusters, W1PadTo, W1Pushes int
	W2Streams, W2Rounds, W2Size   int
	W2Warm                        int // rounds before the measured ones
	W2Interval                    time.Duration
	W3Streams, W3Clusters         int
	W3Settle                      time.Duration
	W4Resources, W4Churn          int
	W4Pushes, W4Size              int
	W5Streams, W5Sources          int
	W6Streams, W6Clusters         int
	W6Settle                      time.Duration
	W7Clusters                    []int // one push of each size, ~1 KB per cluster
	W7Idle                        time.Duration
}

// FullSizes are the sizes docs/performance.md states: a 10 MB CDS push of 10,000 clusters,
// 200 EDS streams, 1,000 idle streams, Delta with 5,000 resources and 1 %
// churn.
func FullSizes() Sizes {
	return Sizes{
		W1Clusters: 10_000, W1PadTo: 940, W1Pushes: 40,
		W2Streams: 200, W2Warm: 50, W2Rounds: 90, W2Size: 800, W2Interval: 100 * time.Millisecond,
		W3Streams: 1000, W3Clusters: 100, W3Settle: 2 * time.Second,
		W4Resources: 5000, W4Churn: 50, W4Pushes: 500, W4Size: 1000,
		W5Streams: 2000, W5Sources: 1,
		W6Streams: 1000, W6Clusters: 200, W6Settle: time.Second,
		W7Clusters: []int{10_000, 40_000}, W7Idle: 3 * time.Second,
	}
}

// QuickSizes keep the sizes of FullSizes but repeat less.
func QuickSizes() Sizes {
	s := FullSizes()
	s.W1Pushes, s.W2Warm, s.W2Rounds, s.W3Settle, s.W4Pushes = 5, 10, 10, time.Second, 100
	return s
}

// TinySizes are for tests: every code path, in milliseconds.
func TinySizes() Sizes {
	return Sizes{
		W1Clusters: 100, W1PadTo: 500, W1Pushes: 3,
		W2Streams: 5, W2Warm: 2, W2Rounds: 3, W2Size: 1000, W2Interval: 5 * time.Millisecond,
		W3Streams: 5, W3Clusters: 10, W3Settle: 0,
		W4Resources: 100, W4Churn: 1, W4Pushes: 3, W4Size: 300,
		W5Streams: 6, W5Sources: 2,
		W6Streams: 5, W6Clusters: 10, W6Settle: 0,
		W7Clusters: []int{100, 400}, W7Idle: 0,
	}
}

// WorkloadIDs name the workloads.
var WorkloadIDs = []string{"W1", "W2", "W3", "W4", "W5", "W6", "W7"}

// NewWorkload builds one workload (its pre-encoded messages), or nil for an
// unknown id.
func NewWorkload(id string, s Sizes) Workload {
	switch id {
	case "W1":
		return NewW1(s)
	case "W2":
		return newW2(s)
	case "W3":
		return newW3(s)
	case "W4":
		return newW4(s)
	case "W5":
		return newW5(s)
	case "W6":
		return newW6(s)
	case "W7":
		return NewW7(s)
	}
	return nil
}

// Workloads builds every workload.
func Workloads(s Sizes) []Workload {
	var ws []Workload
	for _, id := range WorkloadIDs {
		ws = append(ws, NewWorkload(id, s))
	}
	return ws
}

// WorkloadInfo names a workload that ran and says what it sent.
type WorkloadInfo struct {
	ID, Description string
	Reps            int
}

// runTimeout bounds every run: a stuck stream fails the run instead of the harness.
const runTimeout = 5 * time.Minute

// firstError keeps the first error of several goroutines; failed closes
// when there is one, so that a run with many streams stops at the first
// failure instead of waiting for the streams that did not fail.
type firstError struct {
	mu     sync.Mutex
	err    error
	failed chan struct{}
}

func newFirstError() *firstError { return &firstError{failed: make(chan struct{})} }

func (f *firstError) set(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	if f.err == nil {
		f.err = err
		if f.failed != nil {
			close(f.failed)
		}
	}
	f.mu.Unlock()
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// upstreamFailed is what an upstream handler returns after recording err.
func upstreamFailed(errs *firstError, err error) error {
	errs.set(fmt.Errorf("upstream: %w", err))
	return status.Error(codes.Internal, err.Error())
}

// wrongMethod is a stream the workload's upstream does not expect.
func wrongMethod(errs *firstError, got, want string) error {
	return upstreamFailed(errs, fmt.Errorf("stream of %s, want %s", got, want))
}

// waitGate waits for a gate to open, or for the stream to end.
func waitGate(s grpc.ServerStream, gate <-chan struct{}) error {
	select {
	case <-gate:
		return nil
	case <-s.Context().Done():
		return s.Context().Err()
	}
}

// waitFor waits for ch to close within d.
func waitFor(ch <-chan struct{}, d time.Duration, what string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return errors.New("timed out waiting for " + what)
	}
}

// filesPerStream is what one stream of one connection costs in file
// descriptors, in the load generator (the client's connection and the
// upstream's) and in a middle (the client's and its upstream connection);
// fileMargin covers the rest (listeners, pipes, the binary, epoll).
const (
	filesPerStream = 2
	fileMargin     = 64
)

// CheckFileLimit fails when the workloads in want (by id) hold more streams
// open at once than this process may open files for: the run would fail
// half-way with "too many open files". Every middle process has the same
// limit, since it inherits it.
func CheckFileLimit(s Sizes, want map[string]bool) error {
	streams := map[string]int{"W2": s.W2Streams, "W3": s.W3Streams, "W5": s.W5Streams, "W6": s.W6Streams}
	limit, err := FileLimit()
	if err != nil {
		return nil
	}
	for id, n := range streams {
		if need := filesPerStream*n + fileMargin; want[id] && uint64(need) > limit {
			return fmt.Errorf("%s holds %d streams open, which needs about %d file descriptors in this process and as many in the middle; the limit here is %d (ulimit -n; a hard limit can only be raised with CAP_SYS_RESOURCE): at most %d streams",
				id, n, need, limit, (int(limit)-fileMargin)/filesPerStream)
		}
	}
	return nil
}
