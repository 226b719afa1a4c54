package promtest

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/pipeline"
	"github.com/adstap/adstap/tap"
	"github.com/adstap/adstap/track"
)

// Family is one adstap metric family, as a tap's registry describes it.
type Family struct {
	Name string
	// Labels are its label names, sorted; node, which --metrics-node-label
	// adds to the per-type families, is left out.
	Labels []string
	// Type is counter, gauge or histogram, as a gather says it: "" for a
	// family that had no series yet (a vector no event has filled).
	Type string
	// Buckets are a histogram's upper bounds as a scrape writes them in le,
	// +Inf last.
	Buckets []string
}

// TapFamilies returns, by name, every adstap_* metric family of a tap wired
// as adstap run wires it (internal/pipeline) with every output on: the
// registered set, read from the registry's descriptors, so that a family is
// there before it has a series. This is the one list of adstap's metrics
// that the docs, the alert rules and their tests are checked against.
func TapFamilies(t testing.TB) map[string]Family {
	t.Helper()
	p, err := pipeline.Start(context.Background(), pipeline.RunConfig{
		Tap:     tap.Config{Upstream: tap.Address{Network: "tcp", Addr: "127.0.0.1:1"}},
		Observe: pipeline.Config{Version: "test", CheckReferences: true, RetainMaxBytes: 1 << 20},
		Listen:  tap.Address{Network: "tcp", Addr: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatalf("promtest: pipeline.Start: %v", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("promtest: closing the tap: %v", err)
		}
	}()
	reg := p.Metrics.Registry()

	descs := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(descs)
		close(descs)
	}()
	families := map[string]Family{}
	for d := range descs {
		name, labels, ok := parseDesc(d.String())
		if !ok {
			t.Fatalf("promtest: cannot read the descriptor %s", d)
		}
		if !strings.HasPrefix(name, "adstap_") {
			continue // Go's and the process's collectors
		}
		f := families[name]
		f.Name = name
		f.Labels = mergeLabels(f.Labels, labels)
		families[name] = f
	}
	if len(families) == 0 {
		t.Fatal("promtest: the tap's registry describes no adstap metric")
	}

	// One push answered, so that the histograms with labels have a series
	// that says their buckets.
	now := time.Now()
	push := &track.Push{StreamID: 1, TypeURL: codec.TypeCluster, Type: codec.ShortType(codec.TypeCluster), Version: "v1", Nonce: "1", SentAt: now, Bytes: 1, Resources: 1}
	for _, e := range []track.Event{
		track.StreamOpened{Stream: track.StreamMeta{ID: 1, Protocol: codec.SotW, OpenedAt: now}},
		track.PushSent{Push: push},
		track.PushEnded{Push: push, Result: track.ResultACK, At: now, Latency: time.Millisecond},
	} {
		p.Metrics.OnEvent(e)
	}
	gathered, err := reg.Gather()
	if err != nil {
		t.Fatalf("promtest: gathering the tap's metrics: %v", err)
	}
	for _, mf := range gathered {
		f, ok := families[mf.GetName()]
		if !ok || len(mf.GetMetric()) == 0 {
			continue
		}
		f.Type = strings.ToLower(mf.GetType().String())
		if h := mf.GetMetric()[0].GetHistogram(); mf.GetType() == dto.MetricType_HISTOGRAM && h != nil {
			for _, b := range h.GetBucket() {
				f.Buckets = append(f.Buckets, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
			}
			f.Buckets = append(f.Buckets, "+Inf")
		}
		families[f.Name] = f
	}
	return families
}

// descFields reads what client_golang's Desc.String says, the only way it
// offers to read a descriptor: the name, the const labels' names and the
// variable labels (c(name) when constrained).
var descFields = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: .*, constLabels: \{([^{}]*)\}, variableLabels: \{([^{}]*)\}\}$`)

func parseDesc(s string) (string, []string, bool) {
	m := descFields.FindStringSubmatch(s)
	if m == nil {
		return "", nil, false
	}
	var labels []string
	for pair := range strings.SplitSeq(m[2], ",") {
		if name, _, ok := strings.Cut(pair, "="); ok {
			labels = append(labels, name)
		}
	}
	for l := range strings.SplitSeq(m[3], ",") {
		if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
			labels = append(labels, l)
		}
	}
	return m[1], labels, true
}

// mergeLabels is the sorted union of a and b, node left out.
func mergeLabels(a, b []string) []string {
	set := map[string]bool{}
	for _, l := range append(slices.Clone(a), b...) {
		if l != "node" {
			set[l] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
