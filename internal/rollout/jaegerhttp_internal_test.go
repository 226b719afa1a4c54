package rollout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/adstap/adstap/internal/testutil/leakcheck"
)

// otlpSpanJSON is a span as Jaeger's api_v3 writes it over HTTP: OTLP's
// JSON, ids in hex, int64 values as strings.
func otlpSpanJSON(trace, spanID, name string, attrs map[string]string) string {
	var kvs []string
	for k, v := range attrs {
		kvs = append(kvs, fmt.Sprintf(`{"key":%q,"value":{"stringValue":%q}}`, k, v))
	}
	return fmt.Sprintf(`{"traceId":%q,"spanId":%q,"name":%q,"kind":2,"startTimeUnixNano":"1764580032000000000","endTimeUnixNano":"1764580033000000000","attributes":[%s],"status":{"code":2,"message":"rejected"}}`,
		trace, spanID, name, strings.Join(kvs, ","))
}

func tracesJSON(spans ...string) string {
	return `{"result":{"resourceSpans":[{"resource":{"attributes":[{"key":"k8s.pod.name","value":{"stringValue":"reviews-0"}},{"key":"k8s.namespace.name","value":{"stringValue":"shop"}}]},` +
		`"scopeSpans":[{"scope":{"name":"github.com/adstap/adstap"},"spans":[` + strings.Join(spans, ",") + `]}]}]}}`
}

const (
	traceA = "5b8efff798038103d269b633813fc60c"
	traceB = "0af7651916cd43dd8448eb211c80319c"
)

// A proxy that NACKed only CDS, once as a span of its own and 2,431 times
// in an episode span, next to its ACKed EDS: read over HTTP, in OTLP's JSON
// with hex ids, the round names the NACK, counts 2,432 NACKs, and says
// which type did what; a search by attribute, which Jaeger's HTTP form does
// not take, keeps only the traces that match.
func TestRolloutOverHTTPReadsFoldedNACKs(t *testing.T) {
	leakcheck.Check(t)
	const version = "2026-12-01T11:07:12Z/8"
	push := func(typ, result string) map[string]string {
		return map[string]string{"xds.type": typ, "xds.result": result, "xds.version": version, "xds.push_id": version,
			"xds.node.id": "sidecar~10.0.0.1~reviews-0.shop~shop.svc.cluster.local", "xds.full_push": "true"}
	}
	nack := push("cds", "nack")
	nack["xds.error.message"] = "unknown lb_policy MAGLEV"
	folded := push("cds", "nack")
	folded["xds.folded.count"], folded["xds.folded.nacks"] = "2431", "2431"
	other := push("cds", "ack")
	other["xds.version"], other["xds.push_id"] = "v0", "v0"
	body := tracesJSON(
		otlpSpanJSON(traceA, "00f067aa0ba902b7", "CDS push", nack),
		otlpSpanJSON(traceA, "00f067aa0ba902b8", "CDS push (folded)", folded),
		otlpSpanJSON(traceA, "00f067aa0ba902b9", "EDS push", push("eds", "ack")),
		otlpSpanJSON(traceB, "00f067aa0ba902c0", "CDS push", other),
	)
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.String())
		switch r.URL.Path {
		case "/jaeger/api/v3/services":
			fmt.Fprint(w, `{"services":["adstap"]}`)
		case "/jaeger/api/v3/traces":
			if r.URL.Query().Get("query.service_name") != "adstap" || r.URL.Query().Get("query.start_time_min") == "" {
				http.Error(w, `{"error":{"httpCode":400,"message":"bad query"}}`, http.StatusBadRequest)
				return
			}
			fmt.Fprint(w, body)
		default:
			http.Error(w, `{"error":{"httpCode":404,"message":"No traces found"}}`, http.StatusNotFound)
		}
	}))
	defer srv.Close()
	j, err := Dial(srv.URL + "/jaeger/")
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rep, err := Read(context.Background(), j, Query{Service: "adstap", Version: version, Since: time.Hour})
	if err != nil {
		t.Fatalf("Read: %v (queries %v)", err, queries)
	}
	if len(rep.Rounds) != 1 || rep.Converged {
		t.Fatalf("rounds %+v, converged %v; want %s's alone, not converged", rep.Rounds, rep.Converged, version)
	}
	r := rep.Rounds[0]
	if r.TraceID != traceA || r.Reached != 1 || r.Counts[StateNACKed] != 1 {
		t.Fatalf("round %+v: want trace %s, one proxy, NACKED", r, traceA)
	}
	p := r.Proxies[0]
	if p.Name != "reviews-0.shop" || p.NACKs != 2432 || p.Message != "unknown lb_policy MAGLEV" ||
		p.TypeStates["cds"] != StateNACKed || p.TypeStates["eds"] != StateACKed {
		t.Errorf("proxy %+v: want reviews-0.shop, 2432 NACKs of cds with the message, eds ACKED", p)
	}
}

// Past the most spans a read keeps, the rest of the answer is not read,
// and the report says so.
func TestAHugeAnswerIsReadUpToABound(t *testing.T) {
	leakcheck.Check(t)
	const n = 5000
	var spans []string
	for i := range n {
		spans = append(spans, otlpSpanJSON(traceA, fmt.Sprintf("%016x", i+1), "CDS push",
			map[string]string{"xds.type": "cds", "xds.result": "nack", "xds.version": "v1", "xds.node.id": "n"}))
	}
	body := tracesJSON(spans...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/services") {
			fmt.Fprint(w, `{"services":["adstap"]}`)
			return
		}
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	j, err := Dial(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	j.maxSpans = 1000
	rep, err := Read(context.Background(), j, Query{Service: "adstap", Version: "v1", Since: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Note == "" || !strings.Contains(rep.Note, "read the first 1000") {
		t.Errorf("note %q, want one saying the first 1000 spans were read", rep.Note)
	}
	if len(rep.Rounds) != 1 || rep.Rounds[0].Proxies[0].NACKs != 1000 {
		t.Errorf("rounds %+v, want v1's with the 1000 NACKs read", rep.Rounds)
	}
}

// The --jaeger forms: which are HTTP, which gRPC, which mistakes.
func TestJaegerTargets(t *testing.T) {
	leakcheck.Check(t)
	for _, tc := range []struct {
		in         string
		http       bool
		base, addr string
		err        string
	}{
		{in: "127.0.0.1:16685", addr: "127.0.0.1:16685"},
		{in: "jaeger-query.observability:16686", http: true, base: "http://jaeger-query.observability:16686"},
		{in: "http://127.0.0.1:16686", http: true, base: "http://127.0.0.1:16686"},
		{in: "https://tracing.example.com:443/jaeger/", http: true, base: "https://tracing.example.com:443/jaeger"},
		{in: "http://127.0.0.1:16685", addr: "127.0.0.1:16685"},
		{in: "grpc://127.0.0.1:16685", addr: "127.0.0.1:16685"},
		{in: "grpcs://jaeger:443", addr: "jaeger:443"},
		{in: "jaeger", err: "host:port"},
		{in: "http://jaeger", err: "no port"},
		{in: "ftp://jaeger:21", err: `scheme "ftp"`},
		{in: "", err: "--jaeger is required"},
	} {
		got, err := parseTarget(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.err == "" && (got.http != tc.http || (tc.http && got.base != tc.base) || (!tc.http && got.addr != tc.addr)):
			t.Errorf("%q: %+v, want http %v base %q addr %q", tc.in, got, tc.http, tc.base, tc.addr)
		}
	}
}

// A resource written after its spans is theirs all the same, and bad JSON
// is an error, never a panic.
func TestTracesJSONInAnyOrder(t *testing.T) {
	leakcheck.Check(t)
	body := `{"result":{"resourceSpans":[{"scopeSpans":[{"spans":[` + otlpSpanJSON(traceA, "00f067aa0ba902b7", "CDS push", nil) + `]}],` +
		`"resource":{"attributes":[{"key":"k8s.pod.name","value":{"stringValue":"reviews-0"}}]}}]}}`
	r := &spanReader{max: 10}
	if err := readTracesJSON(strings.NewReader(body), r); err != nil {
		t.Fatal(err)
	}
	if len(r.spans) != 1 || podOf(r.spans[0]) != "reviews-0" || r.spans[0].TraceID != traceA {
		t.Errorf("spans %+v, want one of reviews-0 in trace %s", r.spans, traceA)
	}
	for _, bad := range []string{``, `[]`, `{"result":{"resourceSpans":{}}}`, `{"result":{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"00"}]}]}]}}`, `{"result":`} {
		if err := readTracesJSON(strings.NewReader(bad), &spanReader{max: 10}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
