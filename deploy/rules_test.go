package deploy_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"

	"github.com/adstap/adstap/codec"
	"github.com/adstap/adstap/export/upstream"
	"github.com/adstap/adstap/internal/testutil/leakcheck"
	"github.com/adstap/adstap/internal/testutil/promtest"
	"github.com/adstap/adstap/refgraph"
	"github.com/adstap/adstap/track"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	alertsFile     = "alerts.yaml"
	promRuleFile   = "prometheusrule.yaml"
	unitTestsFile  = "alerts_test.yaml"
	installHint    = "install it with: apt-get install prometheus (Debian/Ubuntu; gives /usr/bin/promtool)"
	wantGroupName  = "adstap"
	wantNamespace  = "istio-system"
	wantRuleCRKind = "PrometheusRule"
)

// The typed view of a rule file. Decoding is strict, so a misspelt field
// (annotation:, label:) fails instead of vanishing.
type ruleFile struct {
	Groups []ruleGroup `json:"groups"`
}

type ruleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec ruleFile `json:"spec"`
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func strict(t *testing.T, name string, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(readFile(t, name), v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func alertRules(t *testing.T) ruleFile {
	t.Helper()
	var f ruleFile
	strict(t, alertsFile, &f)
	return f
}

func promRule(t *testing.T) prometheusRule {
	t.Helper()
	var pr prometheusRule
	strict(t, promRuleFile, &pr)
	return pr
}

// TestPrometheusRuleMatchesAlerts keeps the two files in step: the groups are
// compared as decoded YAML, every field and string, whatever the typed view
// above knows about.
func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	leakcheck.Check(t)
	var plain, cr map[string]any
	if err := yaml.Unmarshal(readFile(t, alertsFile), &plain); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(readFile(t, promRuleFile), &cr); err != nil {
		t.Fatal(err)
	}
	if keys := mapKeys(plain); !slices.Equal(keys, []string{"groups"}) {
		t.Errorf("%s: top-level keys %v, want only groups", alertsFile, keys)
	}
	spec, _ := cr["spec"].(map[string]any)
	if keys := mapKeys(spec); !slices.Equal(keys, []string{"groups"}) {
		t.Errorf("%s: spec keys %v, want only groups", promRuleFile, keys)
	}
	if diff := cmp.Diff(plain["groups"], spec["groups"]); diff != "" {
		t.Errorf("the groups of %s and %s differ (-%s +%s):\n%s", alertsFile, promRuleFile, alertsFile, promRuleFile, diff)
	}

	pr := promRule(t)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != wantRuleCRKind {
		t.Errorf("%s: %s %s, want monitoring.coreos.com/v1 %s", promRuleFile, pr.APIVersion, pr.Kind, wantRuleCRKind)
	}
	if pr.Metadata.Name != "adstap" || pr.Metadata.Namespace != wantNamespace {
		t.Errorf("%s: metadata %s/%s, want %s/adstap", promRuleFile, pr.Metadata.Namespace, pr.Metadata.Name, wantNamespace)
	}
	if got := pr.Metadata.Labels["release"]; got != "prometheus" {
		t.Errorf("%s: label release=%q, want prometheus", promRuleFile, got)
	}
}

func mapKeys(m map[string]any) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// promDuration is a Prometheus duration as the Prometheus Operator's CRD
// accepts it.
var promDuration = regexp.MustCompile(`^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$`)

// recordedName is a recording rule's name by the level:metric:operations convention.
var recordedName = regexp.MustCompile(`^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`)

// TestRules checks what an operator relies on in every alert: a severity to
// route on, and a summary, description and runbook to act on.
func TestRules(t *testing.T) {
	leakcheck.Check(t)
	f := alertRules(t)
	if len(f.Groups) != 1 || f.Groups[0].Name != wantGroupName {
		t.Fatalf("%s: want exactly one group named %s, got %d", alertsFile, wantGroupName, len(f.Groups))
	}
	seen := map[string]bool{}
	recorded := map[string]bool{}
	alerts := 0
	for i, r := range f.Groups[0].Rules {
		name := r.Alert + r.Record
		switch {
		case (r.Alert == "") == (r.Record == ""):
			t.Errorf("rule %d: want exactly one of alert and record, got alert=%q record=%q", i, r.Alert, r.Record)
			continue
		case seen[name]:
			t.Errorf("rule %d: %s defined twice", i, name)
		case strings.TrimSpace(r.Expr) == "":
			t.Errorf("%s: no expr", name)
		}
		seen[name] = true
		// A recorded series must be recorded before the rules that read
		// it, so that they see this evaluation's value.
		for _, used := range recordedRef.FindAllString(r.Expr, -1) {
			if !recorded[used] {
				t.Errorf("%s: reads %s, which no earlier rule of the group records", name, used)
			}
		}
		if r.Record != "" {
			if !recordedName.MatchString(r.Record) {
				t.Errorf("%s: want a level:metric:operations name", r.Record)
			}
			if r.For != "" || len(r.Annotations) > 0 {
				t.Errorf("%s: a recording rule has no for or annotations", r.Record)
			}
			recorded[r.Record] = true
			continue
		}
		alerts++
		if !strings.HasPrefix(r.Alert, "Adstap") {
			t.Errorf("%s: want an alert name starting with Adstap", r.Alert)
		}
		if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, sev)
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
		if r.For != "" && !promDuration.MatchString(r.For) {
			t.Errorf("%s: for %q is not a Prometheus duration", r.Alert, r.For)
		}
	}
	if alerts == 0 {
		t.Errorf("%s: no alerts", alertsFile)
	}
	for _, want := range []string{
		"AdstapNACKStorm", "AdstapNACKLoop", "AdstapRepeatedFullSyncs", "AdstapPushUnanswered",
		"AdstapSlowACKs", "AdstapUpstreamConnectFailures", "AdstapSlowFullSync", "AdstapDanglingReferences",
		"AdstapProxyNotACKing", "AdstapPushNearReceiveLimit", "AdstapMeshNACKRatio", "AdstapUpstreamFailing",
	} {
		if !seen[want] {
			t.Errorf("%s: no alert %s", alertsFile, want)
		}
	}
}

// labelValues are the values a label of adstap's metrics takes, by label
// or, where metrics differ, by metric/label; a label not here takes any
// value. Each list is read from where the values come from where there is
// one place.
var labelValues = func() map[string][]string {
	var states, kinds []string
	for _, s := range track.States {
		states = append(states, string(s))
	}
	for _, k := range refgraph.Kinds {
		kinds = append(kinds, string(k))
	}
	return map[string][]string{
		"type":                           codec.ShortTypes(),
		"state":                          states,
		"kind":                           kinds,
		"protocol":                       {string(codec.SotW), string(codec.Delta), string(codec.Opaque)},
		"direction":                      {"request", "response"},
		"result":                         {"ack", "nack"},
		"phase":                          {"dns", "tcp", "tls", "first_response"},
		"adstap_full_syncs_total/reason": {"initial", "repeated"},
		"adstap_upstream_connect_failures_total/reason": {"dns", "tcp", "tls", "other"},
		"adstap_upstream_failing/reason":                upstream.Reasons,
		"adstap_make_before_break_seconds/kind":         {string(refgraph.RouteCluster), string(refgraph.ListenerCluster)},
	}
}()

// metricLabels are the labels of a family, each with the
// values it takes (nil: any). node, added by --metrics-node-label, may be
// on any of them.
func metricLabels(f promtest.Family) map[string][]string {
	ls := map[string][]string{}
	for _, l := range f.Labels {
		v, ok := labelValues[f.Name+"/"+l]
		if !ok {
			v = labelValues[l]
		}
		ls[l] = v
	}
	return ls
}

// lookup returns the labels of the series name (a histogram's _bucket,
// _count and _sum included) among families, and the le values it may be
// matched on.
func lookup(families map[string]promtest.Family, name string) (map[string][]string, []string, bool) {
	if f, ok := families[name]; ok {
		return metricLabels(f), nil, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		base, ok := strings.CutSuffix(name, suffix)
		if f, found := families[base]; ok && found && f.Type == "histogram" {
			if suffix == "_bucket" {
				return metricLabels(f), f.Buckets, true
			}
			return metricLabels(f), nil, true
		}
	}
	return nil, nil, false
}

var (
	metricRef   = regexp.MustCompile(`\badstap_[a-z0-9_]+`)
	selectorRef = regexp.MustCompile(`\b(adstap_[a-z0-9_]+)\s*\{([^}]*)\}`)
	matcherRef  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	groupingRef = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	// literalAlternation is a regular expression that only lists values
	// (NACKED|STALE): each must be one the label takes.
	literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)
	recordedRef        = regexp.MustCompile(`\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b`)
)

// TestMetricNames catches what promtool cannot: a misspelt metric, label or
// label value matches nothing and the alert stays silent forever. It reads
// the annotations too, where the runbooks name metrics.
func TestMetricNames(t *testing.T) {
	leakcheck.Check(t)
	f := alertRules(t)
	families := promtest.TapFamilies(t)
	known := map[string]bool{"node": true, "le": true}
	for _, fam := range families {
		for _, l := range fam.Labels {
			known[l] = true
		}
	}
	for _, r := range f.Groups[0].Rules {
		name := r.Alert + r.Record
		texts := []string{r.Expr}
		for _, a := range r.Annotations {
			texts = append(texts, a)
		}
		for _, text := range texts {
			text = recordedRef.ReplaceAllString(text, "")
			for _, m := range metricRef.FindAllString(text, -1) {
				if _, _, ok := lookup(families, m); !ok {
					t.Errorf("%s: unknown metric %s", name, m)
				}
			}
		}
		for _, sel := range selectorRef.FindAllStringSubmatch(r.Expr, -1) {
			ls, le, ok := lookup(families, sel[1])
			if !ok {
				continue // reported above
			}
			for _, m := range matcherRef.FindAllStringSubmatch(sel[2], -1) {
				label, op, value := m[1], m[2], m[3]
				allowed, ok := ls[label]
				switch {
				case label == "le":
					if le == nil {
						t.Errorf("%s: %s has no le label", name, sel[1])
					} else if !slices.Contains(le, value) {
						t.Errorf("%s: %s has no bucket le=%q (buckets %v)", name, sel[1], value, le)
					}
				case label == "node":
				case !ok:
					t.Errorf("%s: %s has no label %s", name, sel[1], label)
				case op == "=" && allowed != nil && !slices.Contains(allowed, value):
					t.Errorf("%s: %s{%s} never has the value %q (values %v)", name, sel[1], label, value, allowed)
				case op == "=~" && allowed != nil && literalAlternation.MatchString(value):
					for v := range strings.SplitSeq(value, "|") {
						if !slices.Contains(allowed, v) {
							t.Errorf("%s: %s{%s=~%q}: %s is never a value (values %v)", name, sel[1], label, value, v, allowed)
						}
					}
				}
			}
		}
		for _, g := range groupingRef.FindAllStringSubmatch(r.Expr, -1) {
			for l := range strings.SplitSeq(g[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !known[l] {
					t.Errorf("%s: groups by %s, which no adstap metric has", name, l)
				}
			}
		}
	}
}

// The promtool unit test file, as far as this test reads it.
type unitTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestUnitTestsCoverEveryAlert makes sure alerts_test.yaml proves, for every
// alert, both that it fires and that it stays silent in some case.
func TestUnitTestsCoverEveryAlert(t *testing.T) {
	leakcheck.Check(t)
	var u unitTests
	if err := yaml.Unmarshal(readFile(t, unitTestsFile), &u); err != nil {
		t.Fatalf("%s: %v", unitTestsFile, err)
	}
	if !slices.Equal(u.RuleFiles, []string{alertsFile}) {
		t.Errorf("%s: rule_files %v, want [%s]", unitTestsFile, u.RuleFiles, alertsFile)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range u.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, r := range alertRules(t).Groups[0].Rules {
		if r.Alert == "" {
			continue
		}
		if !fires[r.Alert] {
			t.Errorf("%s: no test case where %s fires", unitTestsFile, r.Alert)
		}
		if !silent[r.Alert] {
			t.Errorf("%s: no test case where %s stays silent", unitTestsFile, r.Alert)
		}
	}
}

// TestPromtoolChecksPrometheusRule runs promtool check rules on the groups of
// the PrometheusRule, as Prometheus will load them. Without promtool it skips,
// except in CI.
func TestPromtoolChecksPrometheusRule(t *testing.T) {
	leakcheck.Check(t)
	promtool, err := exec.LookPath("promtool")
	if errors.Is(err, exec.ErrNotFound) && !inCI() {
		t.Skipf("promtool not found, and CI is not set: skipping (%s)", installHint)
	}
	if err != nil {
		t.Fatalf("promtool: %v; %s", err, installHint)
	}
	out, err := yaml.Marshal(promRule(t).Spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "prometheusrule-groups.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), promtool, "check", "rules", path)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the groups of %s: %v\n%s", promRuleFile, err, b)
	}
}

// inCI reports whether CI is set, as CI services set it (CI=true).
func inCI() bool {
	v := strings.TrimSpace(os.Getenv("CI"))
	return v != "" && v != "0" && !strings.EqualFold(v, "false")
}
