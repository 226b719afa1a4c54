package pipeline_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promtest"
	"github.com/adstap/adstap/refgraph"
	"github.com/adstap/adstap/track"
)

const metricsDoc = "../../docs/metrics.md"

var (
	// A row of the doc's table of metrics: | `name{labels}` ... | kind | what |
	docMetricRow = regexp.MustCompile("^\\| `(adstap_[a-z0-9_]+)(?:\\{([a-z_,]*)\\})?`[^|]*\\| ([a-z]+) \\|")
	// A row of the doc's table of labels: | `label` | values |
	docLabelRow  = regexp.MustCompile("^\\| `([a-z_]+)` \\| (.*) \\|$")
	docMetricRef = regexp.MustCompile(`\badstap_[a-z0-9_]+`)
	backticked   = regexp.MustCompile("`([^`]+)`")
	labelValue   = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

// TestMetricsDocMatchesTheRegistry: docs/metrics.md, the metrics' public
// interface, documents every family a tap registers, with its labels and
// kind, and names no metric a tap does not have; its labels table lists
// exactly the values of the type, state and kind labels.
func TestMetricsDocMatchesTheRegistry(t *testing.T) {
	leakcheck.Check(t)
	families := promtest.TapFamilies(t)
	raw, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)

	documented := map[string]bool{}
	labelValues := map[string][]string{}
	for line := range strings.SplitSeq(doc, "\n") {
		if m := docLabelRow.FindStringSubmatch(line); m != nil {
			// The values are the words in backquotes: one each, or a list
			// (lds rds ...); a path or a flag is prose.
			var values []string
			for _, v := range backticked.FindAllStringSubmatch(m[2], -1) {
				for _, w := range strings.Fields(v[1]) {
					if labelValue.MatchString(w) && !slices.Contains(values, w) {
						values = append(values, w)
					}
				}
			}
			labelValues[m[1]] = values
		}
		m := docMetricRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, kind := m[1], m[3]
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		slices.Sort(labels)
		documented[name] = true
		f, ok := families[name]
		switch {
		case !ok:
			t.Errorf("%s documents %s, which a tap does not register", metricsDoc, name)
		case !slices.Equal(labels, f.Labels):
			t.Errorf("%s documents %s with the labels %v; a tap's has %v", metricsDoc, name, labels, f.Labels)
		case f.Type != "" && kind != f.Type:
			t.Errorf("%s documents %s as a %s; a tap's is a %s", metricsDoc, name, kind, f.Type)
		}
	}
	for name := range families {
		if !documented[name] {
			t.Errorf("a tap registers %s, which %s's table of metrics does not document", name, metricsDoc)
		}
	}
	for _, ref := range docMetricRef.FindAllString(doc, -1) {
		if _, ok := families[seriesFamily(ref, families)]; !ok {
			t.Errorf("%s names %s, which a tap does not have", metricsDoc, ref)
		}
	}

	var states, kinds []string
	for _, s := range track.States {
		states = append(states, string(s))
	}
	for _, k := range refgraph.Kinds {
		kinds = append(kinds, string(k))
	}
	for label, want := range map[string][]string{"type": codec.ShortTypes(), "state": states, "kind": kinds} {
		got := slices.Sorted(slices.Values(labelValues[label]))
		if want = slices.Sorted(slices.Values(want)); !slices.Equal(got, want) {
			t.Errorf("%s's labels table gives %s the values %v; a tap's are %v", metricsDoc, label, got, want)
		}
	}
}

// seriesFamily is the family a series name belongs to: a histogram's
// _bucket, _count and _sum series belong to it.
func seriesFamily(name string, families map[string]promtest.Family) string {
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base].Type == "histogram" {
			return base
		}
	}
	return name
}
