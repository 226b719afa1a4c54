// Package promsum reads back, for tests, the samples a Prometheus registry holds, as a scrape shows them.
package promsum

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Gathered sums the samples of the family name that g holds whose labels
// include want (nil: every sample); see Value.
func Gathered(g prometheus.Gatherer, name string, want map[string]string) (float64, error) {
	families, err := g.Gather()
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if HasLabels(m, want) {
				sum += Value(m)
			}
		}
	}
	return sum, nil
}

// HasLabels reports whether m carries every label of want.
func HasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == k && l.GetValue() == v)
		}
		if !found {
			return false
		}
	}
	return true
}

// Value is a sample's value as an alert would read it: a counter's or a
// gauge's value, a histogram's or a summary's count.
func Value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Summary != nil:
		return float64(m.GetSummary().GetSampleCount())
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
