package export_test

import (
	"testing"

	"github.com/adstap/adstap/export"
)

func TestTracingIsOffUntilAnEndpointIsGiven(t *testing.T) {
	tests := []struct {
		name string
		flag string
		env  map[string]string
		want bool
	}{
		{"nothing configured", "", nil, false},
		{"the flag", "http://jaeger:4317", nil, true},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, true},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"SDK disabled", "http://jaeger:4317", map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
		{"traces exporter none", "", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := export.TracingConfig{Endpoint: tc.flag, Getenv: func(k string) string { return tc.env[k] }}
			if got := export.TracingEnabled(cfg); got != tc.want {
				t.Errorf("TracingEnabled = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestVersionTraceIDsAgreeAcrossTapsAndDifferAcrossScopes(t *testing.T) {
	const v = "2026-11-30T09:00:05Z/42"
	a, b := export.VersionTraceID("mesh-1", v), export.VersionTraceID("mesh-1", v)
	if a != b || !a.IsValid() {
		t.Errorf("the same scope and version gave %s and %s", a, b)
	}
	if export.VersionTraceID("mesh-2", v) == a || export.VersionTraceID("mesh-1", v+"0") == a {
		t.Error("another scope or version gave the same trace id")
	}
}
