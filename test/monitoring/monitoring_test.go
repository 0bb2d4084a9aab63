// Package monitoring_test checks the monitoring the operator ships with Prometheus's
// own tool, promtool: the alerting rules of config/prometheus pass `promtool check
// rules` and the unit tests in testdata (`promtool test rules`), which show every alert
// both firing and not firing; every alert has its runbook in docs/monitoring.md, which
// also carries the same rules for OLM installs; and every query of the Grafana
// dashboards in config/grafana parses, the scheduled-scaling one naming every scaling
// metric docs/scheduled-scaling.md lists. That the queries name only metrics a running
// manager exports is checked against a real one in test/e2e/realnode.
package monitoring_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/test/harness/monitoring"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// promtool runs promtool in dir and returns its output; it fails the test with the
// output when promtool fails.
func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := tools.Path("promtool")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ruleDir writes the PrometheusRule's groups as rules.yaml, with the unit tests beside
// it, into a new directory.
func ruleDir(t *testing.T) (string, []monitoring.Group) {
	t.Helper()
	groups, err := monitoring.RuleGroups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := monitoring.WriteRuleFile(filepath.Join(dir, "rules.yaml"), groups); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o600); err != nil { //nolint:gosec // G703: a file in the test's temporary directory
		t.Fatal(err)
	}
	return dir, groups
}

func TestRulesPassPromtoolCheck(t *testing.T) {
	dir, groups := ruleDir(t)
	out := promtool(t, dir, "check", "rules", "rules.yaml")
	n := 0
	for _, g := range groups {
		n += len(g.Rules)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", n); !strings.Contains(out, want) {
		t.Errorf("promtool check rules: %q not in its output:\n%s", want, out)
	}
}

func TestRulesPassTheirUnitTests(t *testing.T) {
	dir, _ := ruleDir(t)
	promtool(t, dir, "test", "rules", "rules_test.yaml")
}

// unitTests is what of testdata/rules_test.yaml says which alerts are expected when.
type unitTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertIsTestedFiringAndNot: a rule whose tests only ever expect silence (or
// only ever expect it to fire) proves nothing about its threshold.
func TestEveryAlertIsTestedFiringAndNot(t *testing.T) {
	_, groups := ruleDir(t)
	data, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests unitTests
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatal(err)
	}
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, g := range groups {
		for _, r := range g.Rules {
			if !firing[r.Alert] {
				t.Errorf("alert %s: no unit test expects it to fire", r.Alert)
			}
			if !silent[r.Alert] {
				t.Errorf("alert %s: no unit test expects it to stay silent", r.Alert)
			}
		}
	}
}

const runbookBase = "https://github.com/phalanks/phalanks-operator/blob/main/docs/monitoring.md#"

// TestEveryAlertHasARunbook: each alert links to a section of docs/monitoring.md that
// exists, named after the alert.
func TestEveryAlertHasARunbook(t *testing.T) {
	_, groups := ruleDir(t)
	docs := readDocs(t)
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(docs, -1) {
		headings[anchor(m[1])] = true
	}
	for _, g := range groups {
		for _, r := range g.Rules {
			url := r.Annotations["runbook_url"]
			want := runbookBase + strings.ToLower(r.Alert)
			if url != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, url, want)
			}
			if !headings[strings.ToLower(r.Alert)] {
				t.Errorf("alert %s: docs/monitoring.md has no section %q", r.Alert, r.Alert)
			}
			for _, k := range []string{"summary", "description"} {
				if r.Annotations[k] == "" {
					t.Errorf("alert %s has no %s", r.Alert, k)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s has no severity", r.Alert)
			}
		}
	}
}

// TestDocsCarryTheRulesForOLM: the PrometheusRule docs/monitoring.md gives OLM users has
// exactly the rules config/prometheus deploys.
func TestDocsCarryTheRulesForOLM(t *testing.T) {
	_, groups := ruleDir(t)
	docs := readDocs(t)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(docs, -1)
	var inDocs []monitoring.Group
	for _, b := range blocks {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Groups []monitoring.Group `json:"groups"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(b[1]), &obj); err == nil && obj.Kind == "PrometheusRule" {
			inDocs = obj.Spec.Groups
		}
	}
	if inDocs == nil {
		t.Fatal("docs/monitoring.md has no PrometheusRule")
	}
	want, _ := yaml.Marshal(groups)
	got, _ := yaml.Marshal(inDocs)
	if !bytes.Equal(want, got) {
		t.Errorf("the rules in docs/monitoring.md differ from config/prometheus/rules.yaml:\ndocs:\n%s\nconfig:\n%s", got, want)
	}
}

// TestDashboardQueriesParse hands every query of every dashboard (with Grafana's
// variables filled in) to Prometheus's parser, as recording rules promtool checks.
func TestDashboardQueriesParse(t *testing.T) {
	paths, err := monitoring.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			queries, err := monitoring.DashboardQueries(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(queries) < 5 {
				t.Fatalf("only %d queries found in %s", len(queries), path)
			}
			checkParses(t, queries)
		})
	}
}

// TestScalingDashboardShowsEveryScalingMetric: each metric docs/scheduled-scaling.md
// lists is named by a query of the scheduled-scaling dashboard, so a metric added to
// the operator and its docs is not left off the dashboard.
func TestScalingDashboardShowsEveryScalingMetric(t *testing.T) {
	documented := documentedMetrics(t, "scheduled-scaling.md", "phalanks_scaling_")
	if len(documented) < 5 {
		t.Fatalf("only %d scaling metrics found in docs/scheduled-scaling.md: %v", len(documented), documented)
	}
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	queries, err := monitoring.DashboardQueries(filepath.Join(root, "config", "grafana", "phalanks-scheduled-scaling.json"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, q := range queries {
		for _, n := range metricName.FindAllString(q.Expr, -1) {
			named[n] = true
			// A histogram is on a panel through its series.
			for _, series := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(n, series); ok {
					named[base] = true
				}
			}
		}
	}
	for _, m := range documented {
		if !named[m] {
			t.Errorf("%s is in docs/scheduled-scaling.md but on no panel of phalanks-scheduled-scaling.json", m)
		}
	}
}

// metricName matches the operator's own metric names in a query.
var metricName = regexp.MustCompile(`\bphalanks_[a-z0-9_]+`)

// documentedMetrics returns the metrics with the given prefix that a metrics table of
// docs/<file> lists (rows starting with the metric's name in backquotes).
func documentedMetrics(t *testing.T, file, prefix string) []string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(" + regexp.QuoteMeta(prefix) + "[a-z0-9_]+)` \\|")
	var out []string
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestParseCheckCatchesABrokenQuery: the check above is real.
func TestParseCheckCatchesABrokenQuery(t *testing.T) {
	dir := t.TempDir()
	writeRecordingRules(t, dir, []monitoring.Query{{Source: "broken", Expr: `sum by (pod (phalanks_storagebucket_shard_slots)`}})
	bin, err := tools.Path("promtool")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(context.Background(), bin, "check", "rules", filepath.Join(dir, "queries.yaml")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "parse error") {
		t.Fatalf("promtool accepted a broken query: %v\n%s", err, out)
	}
}

func checkParses(t *testing.T, queries []monitoring.Query) {
	t.Helper()
	dir := t.TempDir()
	writeRecordingRules(t, dir, queries)
	bin, err := tools.Path("promtool")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "check", "rules", filepath.Join(dir, "queries.yaml")).CombinedOutput()
	if err != nil {
		// promtool names the rule (query_<n>) of each expression it rejects.
		for i, q := range queries {
			if strings.Contains(string(out), fmt.Sprintf("query_%d\"", i)) || strings.Contains(string(out), fmt.Sprintf("query_%d:", i)) {
				t.Errorf("%s does not parse: %s", q.Source, q.Expr)
			}
		}
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// writeRecordingRules writes queries as recording rules query_<index>.
func writeRecordingRules(t *testing.T, dir string, queries []monitoring.Query) {
	t.Helper()
	rules := make([]map[string]string, 0, len(queries))
	for i, q := range queries {
		rules = append(rules, map[string]string{"record": fmt.Sprintf("query_%d", i), "expr": q.Expr})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "queries", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "queries.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readDocs(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// anchor is the fragment GitHub gives a Markdown heading.
func anchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = strings.Map(func(r rune) rune {
		switch {
		case r == ' ':
			return '-'
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			return r
		}
		return -1
	}, h)
	return h
}
