package grafana

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/tracing"
	"github.com/adstap/adstap/internal/testutil/xdstest"
	rel "github.com/adstap/adstap/test/reliability"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const file = "dashboard.json"

// TestFileIsWhatTheGeneratorWrites: dashboard.json is build's
// output; DASHBOARD_UPDATE=1 make dashboard rewrites it.
func TestFileIsWhatTheGeneratorWrites(t *testing.T) {
	got := build()
	if os.Getenv("DASHBOARD_UPDATE") != "" {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (DASHBOARD_UPDATE=1 go test writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not what the generator writes: run DASHBOARD_UPDATE=1 make dashboard", file)
	}
}

// TestFileIsAValidDashboard reads the file as Grafana would import it: a
// title and schema version, a Prometheus data source variable that every
// panel and query reads, no data source named by UID, unique panel ids,
// panels inside the 24-column grid and not overlapping, every query with
// an expression and a unique refId.
func TestFileIsAValidDashboard(t *testing.T) {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title         string `json:"title"`
		SchemaVersion int    `json:"schemaVersion"`
		UID           *string
		Templating    struct {
			List []struct {
				Name, Type, Query string
				Datasource        *struct{ Type, UID string }
			}
		}
		Panels []struct {
			ID         int
			Type       string
			Title      string
			GridPos    struct{ H, W, X, Y int }
			Datasource *struct{ Type, UID string }
			Targets    []struct {
				RefID        string `json:"refId"`
				Expr         string
				LegendFormat string `json:"legendFormat"`
				Datasource   *struct{ Type, UID string }
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if d.Title == "" || d.SchemaVersion < 36 || len(d.Panels) == 0 {
		t.Fatalf("title %q, schemaVersion %d, %d panels: not a dashboard", d.Title, d.SchemaVersion, len(d.Panels))
	}
	if d.UID != nil {
		t.Errorf("the dashboard has a fixed uid %q: Grafana gives an imported dashboard its own", *d.UID)
	}
	const dsVar = "${datasource}"
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			if v.Name != "datasource" || v.Query != "prometheus" {
				t.Errorf("data source variable %q of %q, want datasource of prometheus", v.Name, v.Query)
			}
		case "query":
			if v.Datasource == nil || v.Datasource.UID != dsVar {
				t.Errorf("variable %q reads %+v, want the data source variable", v.Name, v.Datasource)
			}
		}
	}
	if !vars["datasource"] {
		t.Fatal("no data source variable: the dashboard would be bound to one Grafana's data source")
	}
	// Any "uid" anywhere in the file must be the variable.
	for _, m := range regexp.MustCompile(`"uid":\s*"([^"]*)"`).FindAllStringSubmatch(string(raw), -1) {
		if m[1] != dsVar {
			t.Errorf("a hard-coded UID: %s", m[0])
		}
	}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
			t.Errorf("panel %q at %+v: outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != dsVar || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q reads %+v, want the data source variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.Expr == "" || q.RefID == "" || refs[q.RefID] {
				t.Errorf("panel %q: query %+v lacks an expression or a unique refId", p.Title, q)
			}
			refs[q.RefID] = true
			if q.Datasource == nil || q.Datasource.UID != dsVar {
				t.Errorf("panel %q: a query reads %+v, want the data source variable", p.Title, q.Datasource)
			}
		}
	}
}

// targetLabels are the labels Prometheus adds to every series it scrapes,
// and the pod and namespace Kubernetes service discovery's relabelling adds
// (docs/metrics.md); they are not in the tap's own scrape.
var targetLabels = []string{"instance", "job", "namespace", "pod"}

// TestQueriesParseAndNameScrapedSeries parses every query with Prometheus's
// own parser, as Prometheus will see it once Grafana has expanded its
// variables, and checks every metric, label, label value and legend it names
// against a real scrape of a running tap that saw pushes, ACKs, NACKs, a
// storm, a loop, repeated full syncs, a timeout, a stale nonce, a frame it
// could not decode and a reconnect herd.
func TestQueriesParseAndNameScrapedSeries(t *testing.T) {
	families, exemplarLabels := scrapeBusyTap(t)
	checkExemplarLink(t, exemplarLabels)
	p := parser.NewParser(parser.Options{})
	legends := map[string]string{}
	for _, r := range rows {
		for _, pn := range r.panels {
			for _, q := range pn.queries {
				legends[q.expr] = q.legend
			}
		}
	}
	n := 0
	for title, exprs := range queriesByPanel() {
		for _, raw := range exprs {
			n++
			expr, err := p.ParseExpr(expand(raw))
			if err != nil {
				t.Errorf("%s: %q does not parse: %v", title, raw, err)
				continue
			}
			for _, problem := range checkAgainstScrape(expr, families) {
				t.Errorf("%s: %s: %s", title, raw, problem)
			}
			out := outputLabels(expr, families)
			for _, m := range regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).FindAllStringSubmatch(legends[raw], -1) {
				if !slices.Contains(out, m[1]) {
					t.Errorf("%s: legend %q names %s, which the query's result does not have (it has %v)", title, legends[raw], m[1], out)
				}
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d queries checked", n)
	}

	// The checks catch what they are for.
	for _, tc := range []struct{ expr, want string }{
		{`sum(rate(adstap_pushes_totl[1m]))`, "metric adstap_pushes_totl is not in the scrape"},
		{`sum by (typ) (rate(adstap_pushes_total[1m]))`, "groups by typ"},
		{`adstap_pushes_total{kind="cds"}`, "has no label kind"},
		{`adstap_push_ack_seconds_count{result="acked"}`, `no series of adstap_push_ack_seconds_count has result="acked"`},
		{`adstap_pushes_total{le="1"}`, "has no label le"},
		{`adstap_stream_states{state=~"NACKED|ERROR"}`, `no series of adstap_stream_states has state="ERROR"`},
	} {
		expr, err := p.ParseExpr(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(checkAgainstScrape(expr, families), "; "); !strings.Contains(got, tc.want) {
			t.Errorf("checking %s found %q, want %q", tc.expr, got, tc.want)
		}
	}
	if _, err := p.ParseExpr(expand(`sum(rate(adstap_pushes_total{instance=~"$instance"}[$__rate_interval])`)); err == nil {
		t.Error("the parser took an unbalanced parenthesis")
	}
}

// checkExemplarLink: the data sources file links the exemplar label that
// carries the trace id, as a real scrape has it, to the Jaeger data source.
func checkExemplarLink(t *testing.T, labels []string) {
	t.Helper()
	if !slices.Contains(labels, "trace_id") || !slices.Contains(labels, "node_id") {
		t.Fatalf("the exemplars of adstap_push_ack_seconds carry %v, want node_id and trace_id", labels)
	}
	raw, err := os.ReadFile("datasources.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name, Type, UID, Access, URL string
			JSONData                     struct {
				ExemplarTraceIDDestinations []struct {
					Name          string `json:"name"`
					DatasourceUID string `json:"datasourceUid"`
				} `json:"exemplarTraceIdDestinations"`
			} `json:"jsonData"`
		} `json:"datasources"`
	}
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		t.Fatalf("datasources.yaml: %v", err)
	}
	uids := map[string]string{}
	for _, d := range f.Datasources {
		uids[d.UID] = d.Type
	}
	links := 0
	for _, d := range f.Datasources {
		for _, dest := range d.JSONData.ExemplarTraceIDDestinations {
			links++
			if d.Type != "prometheus" || dest.Name != "trace_id" || uids[dest.DatasourceUID] != "jaeger" {
				t.Errorf("exemplar link %+v on %s data source %q: want trace_id to a jaeger data source of the file", dest, d.Type, d.Name)
			}
		}
	}
	if f.APIVersion != 1 || links == 0 {
		t.Errorf("datasources.yaml: apiVersion %d, %d exemplar links; want 1 and a link", f.APIVersion, links)
	}
}

// family finds the metric family a series name belongs to: a histogram's
// _bucket, _sum and _count series belong to it.
func family(name string, families map[string]*dto.MetricFamily) (*dto.MetricFamily, []string) {
	if f, ok := families[name]; ok {
		return f, nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := families[base]; ok && (f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY) {
				if suffix == "_bucket" {
					return f, []string{"le"}
				}
				return f, nil
			}
		}
	}
	return nil, nil
}

// labelsOf lists the label names of a family's series, with extra ones and
// the target labels.
func labelsOf(f *dto.MetricFamily, extra []string) []string {
	set := map[string]bool{"__name__": true}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			set[l.GetName()] = true
		}
	}
	for _, l := range append(extra, targetLabels...) {
		set[l] = true
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

func checkAgainstScrape(expr parser.Expr, families map[string]*dto.MetricFamily) []string {
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			f, extra := family(n.Name, families)
			if f == nil {
				problems = append(problems, fmt.Sprintf("metric %s is not in the scrape", n.Name))
				return nil
			}
			have := labelsOf(f, extra)
			for _, m := range n.LabelMatchers {
				if !slices.Contains(have, m.Name) {
					problems = append(problems, fmt.Sprintf("%s has no label %s (it has %v)", n.Name, m.Name, have))
					continue
				}
				if m.Type.String() == "=" && m.Name != "__name__" && !hasValue(f, m.Name, m.Value) {
					problems = append(problems, fmt.Sprintf("no series of %s has %s=%q", n.Name, m.Name, m.Value))
				}
				// A regular expression that only lists values (NACKED|STALE):
				// each must be one a series has.
				if m.Type.String() == "=~" && literalAlternation.MatchString(m.Value) {
					for v := range strings.SplitSeq(m.Value, "|") {
						if !hasValue(f, m.Name, v) {
							problems = append(problems, fmt.Sprintf("no series of %s has %s=%q", n.Name, m.Name, v))
						}
					}
				}
			}
		case *parser.AggregateExpr:
			in := outputLabels(n.Expr, families)
			for _, g := range n.Grouping {
				if !slices.Contains(in, g) {
					problems = append(problems, fmt.Sprintf("groups by %s, which %s does not have (it has %v)", g, n.Expr, in))
				}
			}
		}
		return nil
	})
	return problems
}

func hasValue(f *dto.MetricFamily, name, value string) bool {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				return true
			}
		}
	}
	return false
}

// outputLabels is what labels the result of an expression can have.
func outputLabels(e parser.Expr, families map[string]*dto.MetricFamily) []string {
	switch n := e.(type) {
	case *parser.VectorSelector:
		f, extra := family(n.Name, families)
		if f == nil {
			return nil
		}
		return slices.DeleteFunc(labelsOf(f, extra), func(l string) bool { return l == "__name__" })
	case *parser.MatrixSelector:
		return outputLabels(n.VectorSelector, families)
	case *parser.ParenExpr:
		return outputLabels(n.Expr, families)
	case *parser.AggregateExpr:
		if (n.Op == parser.TOPK || n.Op == parser.BOTTOMK) && len(n.Grouping) == 0 && !n.Without {
			// topk and bottomk keep the series they pick, labels and all.
			return outputLabels(n.Expr, families)
		}
		if n.Without {
			return slices.DeleteFunc(outputLabels(n.Expr, families), func(l string) bool { return slices.Contains(n.Grouping, l) })
		}
		return slices.Clone(n.Grouping)
	case *parser.Call:
		switch n.Func.Name {
		case "histogram_quantile":
			return slices.DeleteFunc(outputLabels(n.Args[1], families), func(l string) bool { return l == "le" })
		}
		for _, a := range n.Args {
			if a.Type() == parser.ValueTypeVector || a.Type() == parser.ValueTypeMatrix {
				return outputLabels(a, families)
			}
		}
	case *parser.BinaryExpr:
		l, r := outputLabels(n.LHS, families), outputLabels(n.RHS, families)
		if n.LHS.Type() != parser.ValueTypeVector {
			return r
		}
		if n.RHS.Type() != parser.ValueTypeVector {
			return l
		}
		return slices.DeleteFunc(l, func(x string) bool { return !slices.Contains(r, x) })
	}
	return nil
}

// scrapeBusyTap runs a tap wired as adstap run wires it (internal/pipeline),
// in front of a scripted control plane, drives streams through it until
// every family the dashboard reads has a series, and returns a real scrape
// of its /metrics over HTTP.
func scrapeBusyTap(t *testing.T) (families map[string]*dto.MetricFamily, exemplarLabels []string) {
	t.Helper()
	good := xdstest.ClusterAnys(3, 200)
	bad := xdstest.ClusterAnys(4, 200) // other content, rejected every time: a loop
	up := xdstest.StartRawUpstream(t, scriptedUpstream(good, bad))
	spans := tracetest.NewInMemoryExporter()
	tp := rel.StartTap(t, rel.TapOptions{Upstream: up.Addr, Tracing: &tracing.Config{Exporter: spans}, Detect: track.Config{
		NACKStormThreshold: 3, NACKLoopThreshold: 3, RepeatedFullSyncLimit: 1,
		HerdThreshold: 3, HerdWindow: 5 * time.Second,
		// Long enough that no ACKed push times out on a loaded machine,
		// so that only v9, never answered, does: the poll below waits
		// for it.
		PushTimeout: 5 * time.Second, FullSyncSettle: 50 * time.Millisecond,
	}})
	srv := httptest.NewServer(tp.Metrics.Handler())
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc := tp.Client(t)
	node := &core.Node{Id: "sidecar~10.0.0.1~reviews-v1-7d9f.default~default.svc.cluster.local"}
	main := rel.OpenADS(t, ctx, cc)
	send := func(s grpc.ClientStream, b []byte) {
		t.Helper()
		if err := xdstest.Send(s, b); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(s grpc.ClientStream) (version, nonce string) {
		t.Helper()
		b, err := xdstest.Recv(s)
		if err != nil {
			t.Fatal(err)
		}
		var r codec.Response
		if err := r.Decode(b, false); err != nil {
			t.Fatal(err)
		}
		return r.VersionInfo, r.Nonce
	}
	// v1 and v2 (the same clusters) are ACKed; v3..v6 (bad) NACKed: a storm
	// and a loop; v7 ACKed; then a stale answer, and v9 left unanswered.
	send(main, xdstest.RequestFrame(node, xdstest.ClusterType, "", "", ""))
	accepted, firstNonce := "", ""
	for i := 1; i <= 7; i++ {
		v, n := recv(main)
		if i == 1 {
			firstNonce = n
		}
		msg := ""
		if i >= 3 && i <= 6 {
			msg = "Error adding/updating cluster(s) outbound|9080||c3.default.svc.cluster.local: unexpected lbPolicy MAGLEV"
		} else {
			accepted = v
		}
		send(main, xdstest.RequestFrame(nil, xdstest.ClusterType, accepted, n, msg))
	}
	recv(main)                                                                           // v8
	send(main, xdstest.RequestFrame(nil, xdstest.ClusterType, accepted, firstNonce, "")) // stale
	recv(main)                                                                           // v9: never answered

	// A herd: more streams at once, one sending a frame that does not decode.
	for i := range 3 {
		s := rel.OpenADS(t, ctx, cc)
		send(s, xdstest.RequestFrame(&core.Node{Id: fmt.Sprintf("sidecar~10.0.1.%d~herd-%d.default~default.svc.cluster.local", i, i)}, xdstest.ClusterType, "", "", ""))
		recv(s)
		if i == 0 {
			send(s, []byte{0x0a, 0xff}) // a truncated field
		}
	}

	want := map[string]bool{}
	for _, exprs := range queriesByPanel() {
		for _, raw := range exprs {
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(expand(raw))
			if err != nil {
				continue // the test reports it
			}
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				if vs, ok := node.(*parser.VectorSelector); ok {
					want[vs.Name] = true
				}
				return nil
			})
		}
	}
	// What the script makes happen, and must show before the scrape counts.
	happened := []string{"adstap_acks_total", "adstap_nacks_total", "adstap_nack_storms_total", "adstap_nack_loops_total",
		"adstap_push_timeouts_total", "adstap_stale_nonces_total", "adstap_redundant_pushes_total", "adstap_decode_errors_total",
		"adstap_reconnect_herds_total", "adstap_full_sync_seconds", "adstap_push_ack_seconds", "adstap_upstream_connect_seconds"}
	var missing []string
	// A bound only a hang reaches: the scrape is polled until it has them.
	const hang = time.Minute
	deadline := time.Now().Add(hang)
	for {
		families = scrape(t, srv.URL)
		missing = missing[:0]
		for name := range want {
			if f, _ := family(name, families); f == nil || len(f.GetMetric()) == 0 {
				missing = append(missing, name)
			}
		}
		for _, name := range happened {
			if total(families[name]) == 0 {
				missing = append(missing, name+" > 0")
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("after %v the tap's scrape still lacks %v; the dashboard reads them", hang, missing)
	}
	// The exemplars, as Prometheus asks for them (protobuf keeps them; the
	// text format has none).
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	seen := map[string]bool{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if err != io.EOF {
				t.Fatalf("decoding the protobuf scrape: %v", err)
			}
			break
		}
		if mf.GetName() != "adstap_push_ack_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				for _, l := range b.GetExemplar().GetLabel() {
					seen[l.GetName()] = true
				}
			}
		}
	}
	for l := range seen {
		exemplarLabels = append(exemplarLabels, l)
	}
	sort.Strings(exemplarLabels)
	return families, exemplarLabels
}

// total adds up a family's counters and gauges, or its histograms' counts.
func total(f *dto.MetricFamily) float64 {
	var sum float64
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return families
}

// scriptedUpstream answers every request of a stream that decodes with the
// next push: the good clusters for versions 1, 2 and 7 on, the bad ones for
// 3 to 6. A frame that does not decode gets no answer.
func scriptedUpstream(good, bad []*anypb.Any) grpc.StreamHandler {
	return func(_ any, s grpc.ServerStream) error {
		n := 0
		for {
			b, err := xdstest.Recv(s)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if _, err := codec.DecodeRequest(b, false); err != nil {
				continue
			}
			n++
			v := n
			res := good
			if v >= 3 && v <= 6 {
				res = bad
			}
			if err := xdstest.Send(s, xdstest.PushFrame(xdstest.ClusterType, fmt.Sprintf("v%d", v), fmt.Sprintf("nonce-%d", v), res)); err != nil {
				return err
			}
		}
	}
}
