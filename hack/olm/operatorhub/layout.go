// Package operatorhub lays out what a pull request to OperatorHub's community catalogs
// (k8s-operatorhub/community-operators and redhat-openshift-ecosystem/
// community-operators-prod) holds for this operator, and runs on it the static checks
// those repositories' pipelines run (operator-pipelines' community static tests, learned
// from their code): operator-sdk's validators, the CSV's required fields, the layout, the
// file-based catalog and its template, and yamllint.
//
// The layout, under an output directory:
//
//	operators/phalanks-operator/ci.yaml                  FBC on, one basic template for the OpenShift catalogs
//	operators/phalanks-operator/catalog-templates/basic.yaml
//	operators/phalanks-operator/<version>/manifests/…    every release in catalog/, as released
//	operators/phalanks-operator/<version>/metadata/…
//	catalogs/v4.NN/phalanks-operator/catalog.yaml        catalog/ as rendered, per OpenShift catalog
package operatorhub

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
)

const (
	// TemplateName is the catalog template ci.yaml maps every catalog to.
	TemplateName = "basic.yaml"
	// TemplateType is its schema: a basic template lists the catalog's package, channels
	// and deprecations as they are, and each bundle by its image alone.
	TemplateType = "olm.template.basic"
	// Reviewer is who may approve the operator's pull requests (ci.yaml reviewers): the
	// GitHub organisation the CSV's links name.
	Reviewer = "phalanks"
)

// ocpKubernetes pairs each OpenShift release whose catalog OperatorHub's pipeline
// builds with the Kubernetes minor it ships (the pipeline's own table, extended with the
// releases since).
var ocpKubernetes = []struct{ OpenShift, Kubernetes string }{
	{"4.16", "1.29"}, {"4.17", "1.30"}, {"4.18", "1.31"}, {"4.19", "1.32"}, {"4.20", "1.33"}, {"4.21", "1.34"},
}

// Options say where the layout comes from and goes.
type Options struct {
	// Root is the repository root; Out the directory the layout is written under.
	Root, Out string
	// KubernetesVersion is the newest Kubernetes version the operator supports: the
	// deprecated-API validators check the bundles against it.
	KubernetesVersion string
}

// OperatorDir is operators/<package> under out.
func OperatorDir(out string) string { return filepath.Join(out, "operators", bundle.PackageName) }

// CatalogFile is the package's catalog in the named OpenShift catalog (v4.NN) under out.
func CatalogFile(out, name string) string {
	return filepath.Join(out, "catalogs", name, bundle.PackageName, "catalog.yaml")
}

// CIConfig is ci.yaml, as operator-pipelines' schema (ci-schema.json) has it.
type CIConfig struct {
	UpdateGraph string   `json:"updateGraph,omitempty"`
	Reviewers   []string `json:"reviewers,omitempty"`
	FBC         *struct {
		Enabled        bool             `json:"enabled"`
		CatalogMapping []CatalogMapping `json:"catalog_mapping,omitempty"`
	} `json:"fbc,omitempty"`
}

// CatalogMapping maps a catalog template to the catalogs rendered from it.
type CatalogMapping struct {
	TemplateName string   `json:"template_name"`
	CatalogNames []string `json:"catalog_names"`
	Type         string   `json:"type"`
}

// Layout writes the pull request's files under o.Out (replacing what is there).
func Layout(ctx context.Context, o Options) error {
	cfg, err := catalog.Load(ctx, catalog.PackageDir(o.Root))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return err
	}
	minKube := ""
	for _, b := range cfg.Bundles {
		version, err := catalog.BundleVersion(&b)
		if err != nil {
			return err
		}
		src, err := bundleDir(o.Root, version, b.Name == catalog.Head(cfg))
		if err != nil {
			return err
		}
		for _, sub := range []string{"manifests", "metadata"} {
			if err := os.CopyFS(filepath.Join(OperatorDir(o.Out), version, sub), os.DirFS(filepath.Join(src, sub))); err != nil {
				return fmt.Errorf("copy %s of %s: %w", sub, version, err)
			}
		}
		if b.Name == catalog.Head(cfg) {
			if minKube, err = minKubeVersion(filepath.Join(src, bundle.CSVFile)); err != nil {
				return err
			}
		}
	}
	catalogs, err := catalogsFor(minKube)
	if err != nil {
		return err
	}
	ci := CIConfig{UpdateGraph: "replaces-mode", Reviewers: []string{Reviewer}}
	ci.FBC = &struct {
		Enabled        bool             `json:"enabled"`
		CatalogMapping []CatalogMapping `json:"catalog_mapping,omitempty"`
	}{Enabled: true, CatalogMapping: []CatalogMapping{{TemplateName: TemplateName, CatalogNames: catalogs, Type: TemplateType}}}
	if err := writeYAML(filepath.Join(OperatorDir(o.Out), "ci.yaml"), ci); err != nil {
		return err
	}
	tmpl, err := Template(cfg)
	if err != nil {
		return err
	}
	if err := writeYAML(filepath.Join(OperatorDir(o.Out), "catalog-templates", TemplateName), tmpl); err != nil {
		return err
	}
	rendered, err := os.ReadFile(filepath.Join(catalog.PackageDir(o.Root), "catalog.yaml"))
	if err != nil {
		return err
	}
	for _, name := range catalogs {
		if err := writeFile(CatalogFile(o.Out, name), rendered); err != nil {
			return err
		}
	}
	return nil
}

// bundleDir is the bundle directory a catalog version was built from: its released copy,
// or bundle/ for a head not released yet.
func bundleDir(root, version string, head bool) (string, error) {
	released := filepath.Join(root, catalog.ReleaseDir(version))
	if _, err := os.Stat(released); err == nil {
		return released, nil
	}
	if !head {
		return "", fmt.Errorf("the catalog lists %s, but %s does not exist", version, catalog.ReleaseDir(version))
	}
	return filepath.Join(root, bundle.Dir), nil
}

// catalogsFor names the OpenShift catalogs (v4.NN) whose Kubernetes is minKube or newer.
func catalogsFor(minKube string) ([]string, error) {
	floor, err := semver.ParseTolerant(minKube)
	if err != nil {
		return nil, fmt.Errorf("the head CSV's minKubeVersion %q: %w", minKube, err)
	}
	var out []string
	for _, p := range ocpKubernetes {
		k, err := semver.ParseTolerant(p.Kubernetes)
		if err != nil {
			return nil, err
		}
		if k.Major > floor.Major || (k.Major == floor.Major && k.Minor >= floor.Minor) {
			out = append(out, "v"+p.OpenShift)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("minKubeVersion %s is newer than every OpenShift catalog's Kubernetes", minKube)
	}
	return out, nil
}

// Template is the basic catalog template of cfg: its package, channels and
// deprecations as they are, each bundle by its image.
func Template(cfg *declcfg.DeclarativeConfig) (map[string]any, error) {
	var entries []any
	add := func(v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		entries = append(entries, m)
		return nil
	}
	for _, p := range cfg.Packages {
		if err := add(p); err != nil {
			return nil, err
		}
	}
	for _, c := range cfg.Channels {
		if err := add(c); err != nil {
			return nil, err
		}
	}
	for _, d := range cfg.Deprecations {
		if err := add(d); err != nil {
			return nil, err
		}
	}
	for _, b := range cfg.Bundles {
		entries = append(entries, map[string]any{"schema": declcfg.SchemaBundle, "image": b.Image})
	}
	return map[string]any{"schema": TemplateType, "entries": entries}, nil
}

func minKubeVersion(csvFile string) (string, error) {
	data, err := os.ReadFile(csvFile)
	if err != nil {
		return "", err
	}
	var csv struct {
		Spec struct {
			MinKubeVersion string `json:"minKubeVersion"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &csv); err != nil {
		return "", fmt.Errorf("%s: %w", csvFile, err)
	}
	return csv.Spec.MinKubeVersion, nil
}

// writeYAML writes v as a YAML document that opens with "---", as the community
// repositories' files do.
func writeYAML(path string, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	return writeFile(path, append([]byte("---\n"), data...))
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil { //nolint:gosec // G301: a pull request's files, readable like a checkout
		return err
	}
	return os.WriteFile(path, data, 0o644) //nolint:gosec // G306: as above
}

// versions lists the version directories of the layout, oldest first.
func versions(out string) ([]string, error) {
	entries, err := os.ReadDir(OperatorDir(out))
	if err != nil {
		return nil, err
	}
	var vs []semver.Version
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		v, err := semver.Parse(e.Name())
		if err != nil {
			continue // catalog-templates and any other directory
		}
		vs = append(vs, v)
	}
	semver.Sort(vs)
	out2 := make([]string, 0, len(vs))
	for _, v := range vs {
		out2 = append(out2, v.String())
	}
	return out2, nil
}

// catalogNames lists the catalogs/v4.NN directories of the layout.
func catalogNames(out string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(out, "catalogs"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "v") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}
