package jaegertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"
)

const (
	waitTimeout = 30 * time.Second // Jaeger batches spans for 200ms before storing them
	queryLimit  = 1000
)

// Traces returns the traces stored in the last hour with a span of service
// whose span, scope or resource attributes (or event attributes) include all
// of tags, as Jaeger's memory storage matches them: by the value's string
// form, and the tag "error" matches the span status instead. A trace comes
// whole, with the spans of other services too. Call it from the test's
// goroutine: it fails the test on any error.
func (j *Jaeger) Traces(t testing.TB, service string, tags map[string]string) []Trace {
	t.Helper()
	traces, err := j.traces(service, tags)
	if err != nil {
		t.Fatalf("jaegertest: %v", err)
	}
	return traces
}

// WaitTraces polls Traces for up to 30s until ok accepts its answer, and
// returns that answer. Spans reach the query API a moment after they were
// exported, so use it, not Traces, for spans just sent. Call it from the
// test's goroutine.
func (j *Jaeger) WaitTraces(t testing.TB, service string, tags map[string]string, ok func([]Trace) bool) []Trace {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		traces, err := j.traces(service, tags)
		if err == nil && ok(traces) {
			return traces
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("jaegertest: no acceptable traces of service %q with tags %v after %v: %v", service, tags, waitTimeout, err)
			}
			t.Fatalf("jaegertest: no acceptable traces of service %q with tags %v after %v; the last answer had %d:\n%s",
				service, tags, waitTimeout, len(traces), summary(traces))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Trace returns the trace with that ID (hex, as in Trace.TraceID or
// trace.TraceID.String()); it fails the test if Jaeger has none. Call it from
// the test's goroutine.
func (j *Jaeger) Trace(t testing.TB, traceID string) Trace {
	t.Helper()
	traces, err := j.get("/api/traces/" + url.PathEscape(traceID))
	if err != nil {
		t.Fatalf("jaegertest: trace %s: %v", traceID, err)
	}
	if len(traces) != 1 {
		t.Fatalf("jaegertest: trace %s: Jaeger answered %d traces:\n%s", traceID, len(traces), summary(traces))
	}
	return traces[0]
}

func (j *Jaeger) traces(service string, tags map[string]string) ([]Trace, error) {
	now := time.Now()
	q := url.Values{}
	q.Set("service", service)
	if len(tags) > 0 {
		b, err := json.Marshal(tags)
		if err != nil {
			return nil, err
		}
		q.Set("tags", string(b))
	}
	q.Set("limit", strconv.Itoa(queryLimit))
	// The API reads start and end (µs); lookback only tells the UI.
	q.Set("start", strconv.FormatInt(now.Add(-time.Hour).UnixMicro(), 10))
	q.Set("end", strconv.FormatInt(now.Add(time.Minute).UnixMicro(), 10))
	q.Set("lookback", "1h")
	return j.get("/api/traces?" + q.Encode())
}

// get fetches a Jaeger UI API page of traces.
func (j *Jaeger) get(path string) ([]Trace, error) {
	resp, err := j.client.Get("http://" + j.QueryHTTP + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	var page struct {
		Data   []Trace `json:"data"`
		Errors []struct {
			Code    int    `json:"code"`
			Msg     string `json:"msg"`
			TraceID string `json:"traceID"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return nil, fmt.Errorf("GET %s: %s: %w; body: %.2000s", path, resp.Status, err, body)
	}
	if len(page.Errors) > 0 || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.2000s", path, resp.Status, body)
	}
	return page.Data, nil
}
