//go:build unix

package track_test

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/track"
)

// cpuTime is the CPU time the process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTrackPushCostVsStreams measures the CPU one push and its ACK
// cost the tracker with 1 stream and with 1,000, side by side: each round
// drives both trackers in turn, every stream pushed and ACKed from a
// goroutine of its own as the tap does (a control plane pushes every stream
// at once), while a clock sweeps (Tracker.Tick) every 10 ms, a hundred times
// more often than the tap's. The ratio of the two must stay near 1: no lock
// of the tracker spans streams on this path, so streams never queue for one
// another, and the sweep takes one stream at a time. CPU time, not wall
// time, so that other processes on the machine count for little.
func BenchmarkTrackPushCostVsStreams(b *testing.B) {
	const resources, pushesPerRound = 20, 20000
	names := meshClusters(resources)
	var v1, v2 []proto.Message
	for i, name := range names {
		v1 = append(v1, cluster(name))
		if i%10 == 0 {
			v2 = append(v2, clusterV2(name))
		} else {
			v2 = append(v2, cluster(name))
		}
	}
	pushes := []*codec.Response{decodedPush(b, push(cds, 1, v1...)), decodedPush(b, push(cds, 2, v2...))}
	answers := []*codec.Request{decodedRequest(b, ack(cds, 1)), decodedRequest(b, ack(cds, 2))}
	first := decodedRequest(b, withNode(initial(cds), sidecar))

	type load struct {
		tr      *track.Tracker
		streams int
		at      []time.Time // per stream
		n       []int
	}
	newLoad := func(streams int) *load {
		l := &load{tr: track.New(track.Config{}), streams: streams, at: make([]time.Time, streams), n: make([]int, streams)}
		for i := range streams {
			id := uint64(i + 1)
			l.tr.OpenStream(track.StreamMeta{ID: id, Method: adsSotW, OpenedAt: t0})
			l.tr.Request(id, t0, first, 100)
			l.at[i] = t0
		}
		return l
	}
	// round pushes pushesPerRound times in all, spread over the streams,
	// and returns the CPU time per push.
	round := func(l *load) time.Duration {
		done, swept := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(swept)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					l.tr.Tick(t0)
				}
			}
		}()
		before := cpuTime(b)
		var wg sync.WaitGroup
		for i := range l.streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := uint64(i + 1)
				for range pushesPerRound / l.streams {
					k := l.n[i] % 2
					l.n[i]++
					l.at[i] = l.at[i].Add(ms)
					l.tr.Response(id, l.at[i], pushes[k], 1000)
					l.tr.Request(id, l.at[i], answers[k], 100)
				}
			}()
		}
		wg.Wait()
		took := cpuTime(b) - before
		close(done)
		<-swept
		return took / pushesPerRound
	}
	one, many := newLoad(1), newLoad(1000)
	round(one) // the acknowledged states reach their steady size
	round(many)
	var perOne, perMany time.Duration
	b.ResetTimer()
	for b.Loop() {
		perOne += round(one)
		perMany += round(many)
	}
	b.ReportMetric(float64(perOne.Nanoseconds())/float64(b.N), "cpu-ns/push@1")
	b.ReportMetric(float64(perMany.Nanoseconds())/float64(b.N), "cpu-ns/push@1000")
	b.ReportMetric(float64(perMany)/float64(perOne), "ratio")
}
