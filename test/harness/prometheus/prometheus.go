// Package prometheus runs the monitoring stack users run next to the operator on the
// local cluster's real node: the Prometheus Operator as its upstream bundle.yaml installs
// it (CRDs, RBAC, the operator's Deployment), and a Prometheus it manages, which scrapes
// ServiceMonitors and evaluates PrometheusRules. The three images (prometheus-operator,
// prometheus-config-reloader, prometheus) are built without a container runtime from the
// binaries of the prometheus-operator and prometheus tool sets, laid out as their
// upstream Dockerfiles lay them out, under the quay.io names the operator's manifests and
// defaults use: a node mirroring quay.io runs them from its registry. It also queries
// Prometheus's HTTP API.
package prometheus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/images"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Images are the stack's images, each under the repository path its quay.io name has
// ("prometheus/prometheus:v3.16.0" for quay.io/prometheus/prometheus:v3.16.0).
type Images struct {
	// Operator and ConfigReloader carry the Prometheus Operator's version, Prometheus
	// its own.
	Operator, ConfigReloader, Prometheus string
	// PrometheusVersion is Prometheus's version ("v3.16.0"), for the Prometheus
	// resource's spec.version.
	PrometheusVersion string

	built map[string]v1.Image
}

// Registry is where the images' names point: a node mirroring it pulls them from its
// own registry.
const Registry = "quay.io"

// BuildImages builds the three images from the tool sets' binaries.
func BuildImages(ctx context.Context) (*Images, error) {
	opVersion, err := binaryVersion(ctx, "prometheus-operator")
	if err != nil {
		return nil, err
	}
	promVersion, err := binaryVersion(ctx, "prometheus")
	if err != nil {
		return nil, err
	}
	im := &Images{
		Operator:          "prometheus-operator/prometheus-operator:v" + opVersion,
		ConfigReloader:    "prometheus-operator/prometheus-config-reloader:v" + opVersion,
		Prometheus:        "prometheus/prometheus:v" + promVersion,
		PrometheusVersion: "v" + promVersion,
		built:             map[string]v1.Image{},
	}
	var errs []error
	im.built[im.Operator], err = binaryImage("prometheus-operator", "/bin/operator", "", "8080/tcp")
	errs = append(errs, err)
	im.built[im.ConfigReloader], err = binaryImage("prometheus-config-reloader", "/bin/prometheus-config-reloader", "", "8080/tcp")
	errs = append(errs, err)
	im.built[im.Prometheus], err = binaryImage("prometheus", "/bin/prometheus", "/prometheus", "9090/tcp")
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return im, nil
}

// binaryImage lays a tool binary out as its upstream Dockerfile does: at path, the
// entrypoint, run as nobody, in workDir (created writable) when there is one.
func binaryImage(binary, path, workDir, port string) (v1.Image, error) {
	bin, err := tools.Path(binary)
	if err != nil {
		return nil, err
	}
	entries := []imagebuild.Entry{imagebuild.HostFile(path, bin, 0o755)}
	if workDir != "" {
		entries = append(entries, imagebuild.Dir(workDir, 0o777).Owner(65534, 65534))
	}
	img, err := imagebuild.Image(imagebuild.Config{
		Platform:     images.Platform(),
		Entrypoint:   []string{path},
		User:         "65534:65534",
		WorkingDir:   workDir,
		ExposedPorts: []string{port},
	}, entries)
	if err != nil {
		return nil, fmt.Errorf("image of %s: %w", binary, err)
	}
	return img, nil
}

// Push pushes each image with push (a real node's Cluster.Push).
func (im *Images) Push(ctx context.Context, push func(context.Context, string, imagebuild.Artifact) (string, error)) error {
	for repo, img := range im.built {
		if _, err := push(ctx, repo, img); err != nil {
			return fmt.Errorf("push %s: %w", repo, err)
		}
	}
	return nil
}

var versionLine = regexp.MustCompile(`version (\d+\.\d+\.\d+)`)

// binaryVersion is the version a Prometheus-family binary reports (`--version`), which
// the tool set stamps in.
func binaryVersion(ctx context.Context, name string) (string, error) {
	bin, err := tools.Path(name)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", name, err, out)
	}
	m := versionLine.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s --version reports no version: %s", name, out)
	}
	return string(m[1]), nil
}

// OperatorBundle returns the Prometheus Operator's bundle.yaml (its CRDs, RBAC and
// Deployment in the default namespace) at the version the prometheus-operator tool set
// pins, from the module cache the tool set was built from.
func OperatorBundle(ctx context.Context) ([]byte, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/prometheus-operator/prometheus-operator")
	cmd.Dir = filepath.Join(root, "hack", "tools", "prometheus-operator")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("find the Prometheus Operator's module (make tools-prometheus-operator downloads it): %w: %s", err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return nil, fmt.Errorf("the Prometheus Operator's module is not in the module cache: run `go -C hack/tools/prometheus-operator mod download`")
	}
	return os.ReadFile(filepath.Join(dir, "bundle.yaml"))
}

// API is a Prometheus server's HTTP API.
type API struct {
	// URL is the server's base URL ("http://10.244.0.7:9090").
	URL    string
	Client *http.Client
}

// response is the envelope of every API answer.
type response struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

func (a *API) get(ctx context.Context, path string, params url.Values, into any) error {
	hc := a.Client
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	u := a.URL + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, into)
}

// Sample is one series of an instant query's result.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query evaluates an instant query now.
func (a *API) Query(ctx context.Context, expr string) ([]Sample, error) {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := a.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	if data.ResultType != "vector" {
		return nil, nil
	}
	var samples []Sample
	return samples, json.Unmarshal(data.Result, &samples)
}

// Target is a scrape target as the targets API reports it.
type Target struct {
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
	Labels     map[string]string `json:"labels"`
}

// Targets returns the active targets.
func (a *API) Targets(ctx context.Context) ([]Target, error) {
	var data struct {
		ActiveTargets []Target `json:"activeTargets"`
	}
	err := a.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data)
	return data.ActiveTargets, err
}

// RuleGroup is a rule group as the rules API reports it.
type RuleGroup struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Rules []struct {
		Name      string `json:"name"`
		Query     string `json:"query"`
		Health    string `json:"health"`
		LastError string `json:"lastError"`
		Type      string `json:"type"`
	} `json:"rules"`
}

// Rules returns the loaded rule groups.
func (a *API) Rules(ctx context.Context) ([]RuleGroup, error) {
	var data struct {
		Groups []RuleGroup `json:"groups"`
	}
	err := a.get(ctx, "/api/v1/rules", nil, &data)
	return data.Groups, err
}

// Config returns the configuration Prometheus runs with, as YAML.
func (a *API) Config(ctx context.Context) (string, error) {
	var data struct {
		YAML string `json:"yaml"`
	}
	err := a.get(ctx, "/api/v1/status/config", nil, &data)
	return data.YAML, err
}

// MetricNames returns the metric names an expression selects, as Prometheus's own
// parser reads it (/api/v1/parse_query).
func (a *API) MetricNames(ctx context.Context, expr string) ([]string, error) {
	var ast any
	if err := a.get(ctx, "/api/v1/parse_query", url.Values{"query": {expr}}, &ast); err != nil {
		return nil, err
	}
	var names []string
	var walk func(any)
	walk = func(n any) {
		switch v := n.(type) {
		case map[string]any:
			if v["type"] == "vectorSelector" || v["type"] == "matrixSelector" {
				if name, _ := v["name"].(string); name != "" {
					names = append(names, name)
				}
				matchers, _ := v["matchers"].([]any)
				for _, m := range matchers {
					mm, _ := m.(map[string]any)
					if mm == nil || mm["name"] != "__name__" || v["name"] != "" {
						continue
					}
					// A name matched by a regular expression names no single metric.
					if mm["type"] == "=" {
						names = append(names, fmt.Sprint(mm["value"]))
					} else {
						names = append(names, fmt.Sprintf("{__name__%s%q}", mm["type"], mm["value"]))
					}
				}
			}
			for _, child := range v {
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(ast)
	return names, nil
}
