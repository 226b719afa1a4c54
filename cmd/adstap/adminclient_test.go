package main

import (
	"testing"
	"time"

	"github.com/adstap/adstap/export/metrics"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

func TestStatusWords(t *testing.T) {
	leakcheck.Check(t)
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ago  time.Duration
		want string
	}{
		{-time.Second, "0ms"}, // a clock a little ahead
		{350 * time.Millisecond, "350ms"},
		{12*time.Second + 900*time.Millisecond, "12s"},
		{4*time.Minute + 10*time.Second, "4m10s"},
		{3*time.Hour + 20*time.Minute, "3h20m"},
		{53 * time.Hour, "2d5h"},
	} {
		if got := age(now, now.Add(-tc.ago)); got != tc.want {
			t.Errorf("age(%v ago) = %q, want %q", tc.ago, got, tc.want)
		}
	}
	for _, tc := range []struct{ node, want string }{
		{"sidecar~10.0.0.1~reviews-v1-7d9f.default~default.svc.cluster.local", "reviews-v1-7d9f.default"},
		{"router~10.0.0.2~istio-ingressgateway-5c8d.istio-system~istio-system.svc.cluster.local", "istio-ingressgateway-5c8d.istio-system"},
		{"projects/123/networks/default/nodes/abc", "projects/123/networks/default/nodes/abc"},
		{"a~b~~d", "a~b~~d"},
		{"", "(stream 7, no node yet)"},
	} {
		if got := proxyName(tc.node, 7); got != tc.want {
			t.Errorf("proxyName(%q) = %q, want %q", tc.node, got, tc.want)
		}
	}
	for _, tc := range []struct{ id, want string }{
		{`{"Component":"istiod","ID":"istiod-5d7c9d8d9b-x2x4k","Info":{"version":"1.28.1"}}`, "istiod-5d7c9d8d9b-x2x4k"},
		{`{"Component":"istiod"}`, `{"Component":"istiod"}`},
		{"{not json", "{not json"},
		{"cp-east-1", "cp-east-1"},
	} {
		if got := metrics.ControlPlaneName(tc.id); got != tc.want {
			t.Errorf("metrics.ControlPlaneName(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
	if got := printable("node\x1b[2J\x07\nx"); got != "node\uFFFD[2J\uFFFD\uFFFDx" {
		t.Errorf("printable kept a control character: %q", got)
	}
}
