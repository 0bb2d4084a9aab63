// Package monitoring reads the monitoring the operator ships: the alerting rules of
// config/prometheus (the PrometheusRule as kustomize renders it) and the PromQL queries
// of the Grafana dashboards in config/grafana, with Grafana's variables replaced by
// values Prometheus accepts, so that tests can hand them to Prometheus's own parser
// (promtool, or a running Prometheus).
package monitoring

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/test/harness/deploy"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Query is one PromQL expression the operator ships, and where.
type Query struct {
	// Source names it: "rule PhalanksStorageBucketNotReady", or the dashboard file,
	// panel and target.
	Source string
	Expr   string
}

// Rule is an alerting rule of the PrometheusRule.
type Rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Group is a rule group of the PrometheusRule.
type Group struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// RuleGroups renders config/prometheus and returns the groups of its PrometheusRule.
func RuleGroups(ctx context.Context) ([]Group, error) {
	objs, err := deploy.Render(ctx, "config/prometheus")
	if err != nil {
		return nil, err
	}
	for _, u := range objs {
		if u.GetKind() != "PrometheusRule" {
			continue
		}
		raw, found, err := unstructured.NestedSlice(u.Object, "spec", "groups")
		if err != nil {
			return nil, fmt.Errorf("PrometheusRule %s: %w", u.GetName(), err)
		}
		if !found {
			return nil, fmt.Errorf("PrometheusRule %s has no spec.groups", u.GetName())
		}
		data, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		var groups []Group
		if err := json.Unmarshal(data, &groups); err != nil {
			return nil, fmt.Errorf("PrometheusRule %s: %w", u.GetName(), err)
		}
		return groups, nil
	}
	return nil, errors.New("config/prometheus renders no PrometheusRule")
}

// WriteRuleFile writes groups as a Prometheus rule file (what the Prometheus Operator
// hands Prometheus) to path.
func WriteRuleFile(path string, groups []Group) error {
	data, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// RuleQueries returns the expression of every rule.
func RuleQueries(groups []Group) []Query {
	var out []Query
	for _, g := range groups {
		for _, r := range g.Rules {
			out = append(out, Query{Source: "rule " + r.Alert, Expr: r.Expr})
		}
	}
	return out
}

// Dashboards returns the paths of config/grafana's dashboards.
func Dashboards() ([]string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(root, "config", "grafana", "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, errors.New("config/grafana holds no dashboard")
	}
	sort.Strings(paths)
	return paths, nil
}

// dashboard is what of a Grafana dashboard's JSON holds queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	// Collapsed rows keep their panels inside.
	Panels []panel `json:"panels"`
}

// grafanaVariables are the variables Grafana fills in before a query reaches
// Prometheus, with values Prometheus accepts in their place: a range for the interval
// variables, a regular expression matching everything for the dashboards' own
// multi-value variables (they are only used in =~ matchers).
var grafanaVariables = regexp.MustCompile(`\$\{?(__rate_interval|__interval|__range|[a-z_]+)\}?`)

func substitute(expr string) string {
	return grafanaVariables.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		if strings.HasPrefix(name, "__") {
			return "5m"
		}
		return ".*"
	})
}

// labelValues matches a Grafana variable query label_values(<selector>, <label>).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// DashboardQueries returns the PromQL of every panel target and every query variable
// (the series selector of a label_values() query) of the dashboard at path, with
// Grafana's variables substituted.
func DashboardQueries(path string) ([]Query, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	name := filepath.Base(path)
	var out []Query
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			for _, t := range p.Targets {
				out = append(out, Query{Source: fmt.Sprintf("%s panel %q target %s", name, p.Title, t.RefID), Expr: substitute(t.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			// Older dashboards store the query as a plain string.
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				return nil, fmt.Errorf("%s variable %s: %w", name, v.Name, err)
			}
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q.Query))
		if m == nil {
			return nil, fmt.Errorf("%s variable %s: %q is not label_values(<selector>, <label>)", name, v.Name, q.Query)
		}
		out = append(out, Query{Source: fmt.Sprintf("%s variable %s", name, v.Name), Expr: substitute(m[1])})
	}
	for _, q := range out {
		if strings.TrimSpace(q.Expr) == "" {
			return nil, fmt.Errorf("%s has an empty query", q.Source)
		}
	}
	return out, nil
}

// AllQueries returns the expressions of the rules and of every dashboard.
func AllQueries(ctx context.Context) ([]Query, error) {
	groups, err := RuleGroups(ctx)
	if err != nil {
		return nil, err
	}
	out := RuleQueries(groups)
	paths, err := Dashboards()
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		qs, err := DashboardQueries(p)
		if err != nil {
			return nil, err
		}
		out = append(out, qs...)
	}
	return out, nil
}
