package promsum_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adstap/adstap/internal/testutil/promsum"
)

func TestGathered(t *testing.T) {
	reg := prometheus.NewRegistry()
	pushes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pushes_total"}, []string{"type", "result"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "latency_seconds"}, []string{"type"})
	streams := prometheus.NewGauge(prometheus.GaugeOpts{Name: "streams"})
	reg.MustRegister(pushes, latency, streams)
	pushes.WithLabelValues("cds", "ack").Add(3)
	pushes.WithLabelValues("cds", "nack").Add(2)
	pushes.WithLabelValues("eds", "ack").Add(7)
	for range 4 {
		latency.WithLabelValues("cds").Observe(0.1)
	}
	latency.WithLabelValues("eds").Observe(0.2)
	streams.Set(9)

	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"pushes_total", nil, 12},
		{"pushes_total", map[string]string{"type": "cds"}, 5},
		{"pushes_total", map[string]string{"type": "cds", "result": "nack"}, 2},
		{"pushes_total", map[string]string{"type": "lds"}, 0},
		{"latency_seconds", map[string]string{"type": "cds"}, 4},
		{"latency_seconds", nil, 5},
		{"streams", nil, 9},
		{"no_such_family", nil, 0},
	} {
		got, err := promsum.Gathered(reg, tt.name, tt.labels)
		if err != nil || got != tt.want {
			t.Errorf("Gathered(%s, %v) = %v, %v; want %v", tt.name, tt.labels, got, err, tt.want)
		}
	}
}
