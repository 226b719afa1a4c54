package metrics

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// typeSeries are the series of one type that every push and its answer
// touch, found once: WithLabelValues hashes its label values and takes the
// vector's lock at each call, and a push and its ACK made eight such calls,
// a fifth of what observing a small push cost. Only without the node label,
// where a type's label values are the type alone.
type typeSeries struct {
	pushes, acks, nacks, timeouts prometheus.Counter
	pending                       prometheus.Gauge
	pushBytes, pushResources      prometheus.Observer
	// The latency series appear with the type's first answer of each
	// result, as they did when looked up at each answer.
	ackLatency, nackLatency atomic.Pointer[prometheus.Observer]
	// fullInitial and fullRepeated are the type's full syncs by reason,
	// made at the first of each, as the latency series are.
	fullInitial, fullRepeated atomic.Pointer[prometheus.Counter]
	// ackExemplarAt are when each bucket of the ACK latency last took an
	// exemplar, in Unix nanoseconds of the answers.
	ackExemplarAt [latencyBucketCount + 1]atomic.Int64
}

// latencyBucketCount is len(latencyBuckets), a constant for the arrays
// that hold one thing per bucket (a test ties the two).
const latencyBucketCount = 14

// exemplarEvery is how often a bucket of a type's ACK latency takes a new
// exemplar. The client makes each exemplar anew (its labels checked and
// copied, a timestamp): at thousands of ACKs a second that was a tenth of
// what a push left behind, for exemplars Prometheus reads once a scrape. A
// bucket's exemplar is its latest ACK's, or one a second older at most; a
// bucket seldom reached gets every ACK's. A NACK always takes its bucket's:
// `adstap status` and `adstap rollout` follow the latest NACK's to its span.
const exemplarEvery = time.Second

// exemplarDue says whether an answer of result, after seconds, at at,
// takes its bucket's exemplar, and if so, marks the bucket's time.
func (s *typeSeries) exemplarDue(result string, seconds float64, at time.Time) bool {
	if s == nil || result != "ack" || at.IsZero() {
		return true
	}
	slot := &s.ackExemplarAt[sort.SearchFloat64s(latencyBuckets, seconds)]
	now, last := at.UnixNano(), slot.Load()
	if last != 0 && now >= last && now-last < int64(exemplarEvery) {
		return false
	}
	return slot.CompareAndSwap(last, now)
}

// seriesSlots holds, for every type of codec.ShortType's fixed set, its
// typeSeries once its first push made them: a map read without a lock, made
// whole in New.
type seriesSlots map[string]*atomic.Pointer[typeSeries]

func newSeriesSlots() seriesSlots {
	s := seriesSlots{}
	for t := range typeLabelValues {
		s[t] = new(atomic.Pointer[typeSeries])
	}
	return s
}

// series returns the series of short type t, made by its first push (push
// set); nil with the node label, for a type outside the fixed set, or,
// unless push, before the type's first push.
func (m *Metrics) series(t string, push bool) *typeSeries {
	slot := m.slots[t]
	if slot == nil {
		return nil
	}
	if s := slot.Load(); s != nil || !push {
		return s
	}
	l := typeLabelValues[t]
	s := &typeSeries{
		pushes: m.pushes.WithLabelValues(l...), acks: m.acks.WithLabelValues(l...),
		nacks: m.nacks.WithLabelValues(l...), timeouts: m.timeouts.WithLabelValues(l...),
		pending:   m.pending.WithLabelValues(l...),
		pushBytes: m.pushBytes.WithLabelValues(l...), pushResources: m.pushResources.WithLabelValues(l...),
	}
	// Two first pushes at once make the same series: either is kept.
	slot.CompareAndSwap(nil, s)
	return slot.Load()
}

// latency returns the latency series of s's type for result, made at its
// first use.
func (m *Metrics) latency(s *typeSeries, l []string, result string) prometheus.Observer {
	var slot *atomic.Pointer[prometheus.Observer]
	switch result {
	case "ack":
		slot = &s.ackLatency
	case "nack":
		slot = &s.nackLatency
	default:
		return m.ackSeconds.WithLabelValues(append(l, result)...)
	}
	if o := slot.Load(); o != nil {
		return *o
	}
	o := m.ackSeconds.WithLabelValues(append(l, result)...)
	slot.CompareAndSwap(nil, &o)
	return *slot.Load()
}

// fullSync returns the full syncs counter of s's type for reason ("initial"
// or "repeated"), made at its first use; s nil looks it up.
func (m *Metrics) fullSync(s *typeSeries, l []string, reason string) prometheus.Counter {
	if s == nil {
		return m.fullSyncs.WithLabelValues(append(l, reason)...)
	}
	slot := &s.fullRepeated
	if reason == "initial" {
		slot = &s.fullInitial
	}
	if c := slot.Load(); c != nil {
		return *c
	}
	c := m.fullSyncs.WithLabelValues(append(l, reason)...)
	slot.CompareAndSwap(nil, &c)
	return *slot.Load()
}

// lookUp returns the series of the labels l as WithLabelValues finds them,
// for the node label or a type outside the fixed set: not kept, so that
// every answer looks its latency series up and takes its exemplar.
func (m *Metrics) lookUp(l []string) *typeSeries {
	return &typeSeries{
		acks: m.acks.WithLabelValues(l...), nacks: m.nacks.WithLabelValues(l...),
		timeouts: m.timeouts.WithLabelValues(l...), pending: m.pending.WithLabelValues(l...),
	}
}
