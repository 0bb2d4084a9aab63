package operatorhub

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
)

// Finding is one problem a hub's pipeline would report on the pull request.
type Finding struct {
	// Check names the check, Path the file or directory (relative to the layout).
	Check, Path, Message string
}

func (f Finding) String() string { return fmt.Sprintf("%s: %s: %s", f.Path, f.Check, f.Message) }

// knownSDKWarning is the one warning operator-sdk gives every bundle under
// --select-optional name=operatorhub, which OperatorHub's pipeline still runs: the
// validator itself is deprecated. The pipeline reports it as a warning on every
// submission; it says nothing about the bundle.
const knownSDKWarning = `The "operatorhub" validator is deprecated`

//go:embed yamllint.yaml
var yamllintConfig []byte

// Check runs the hubs' static checks on the layout under o.Out and returns what they
// find; an error means a check could not run.
func Check(ctx context.Context, o Options) ([]Finding, error) {
	var out []Finding
	ci, fs, err := checkCIConfig(o.Out)
	if err != nil {
		return nil, err
	}
	out = append(out, fs...)
	vs, err := versions(o.Out)
	if err != nil {
		return nil, err
	}
	if len(vs) == 0 {
		out = append(out, Finding{"layout", rel(o.Out, OperatorDir(o.Out)), "no bundle version directory"})
	}
	for i, v := range vs {
		// The pull request adds the newest version; the pipeline runs the bundle checks
		// on the bundle it adds, and the operator-wide ones on every version.
		fs, err := checkBundle(ctx, o, v, i == len(vs)-1)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	if ci != nil {
		fs, err := checkCatalogs(ctx, o.Out, ci, vs)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	fs, err = yamllint(ctx, o.Out)
	if err != nil {
		return nil, err
	}
	return append(out, fs...), nil
}

// checkCIConfig checks ci.yaml against operator-pipelines' schema and its catalog
// mapping against the layout; it returns the parsed file when it parses.
func checkCIConfig(out string) (*CIConfig, []Finding, error) {
	path := filepath.Join(OperatorDir(out), "ci.yaml")
	p := rel(out, path)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, []Finding{{"ci.yaml", p, "missing"}}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var fs []Finding
	add := func(format string, a ...any) { fs = append(fs, Finding{"ci.yaml", p, fmt.Sprintf(format, a...)}) }
	ci := &CIConfig{}
	if err := yaml.Unmarshal(data, ci); err != nil {
		add("does not parse: %v", err)
		return nil, fs, nil
	}
	if ci.UpdateGraph != "" && ci.UpdateGraph != "replaces-mode" && ci.UpdateGraph != "semver-mode" {
		add("updateGraph %q is not replaces-mode or semver-mode", ci.UpdateGraph)
	}
	if len(ci.Reviewers) == 0 {
		add("reviewers lists nobody")
	}
	if ci.FBC == nil || !ci.FBC.Enabled {
		add("fbc.enabled is not true: the catalogs are file-based")
		return ci, fs, nil
	}
	mapped := map[string]string{}
	for _, m := range ci.FBC.CatalogMapping {
		if m.Type != "olm.template.basic" && m.Type != "olm.semver" {
			add("catalog_mapping %s: type %q is not olm.template.basic or olm.semver", m.TemplateName, m.Type)
		}
		if _, err := os.Stat(filepath.Join(OperatorDir(out), "catalog-templates", m.TemplateName)); err != nil {
			add("catalog_mapping names template %q, which catalog-templates/ does not hold", m.TemplateName)
		}
		if len(m.CatalogNames) == 0 {
			add("catalog_mapping %s names no catalog", m.TemplateName)
		}
		for _, c := range m.CatalogNames {
			if other, ok := mapped[c]; ok {
				add("catalog %s is mapped to two templates, %s and %s", c, other, m.TemplateName)
			}
			mapped[c] = m.TemplateName
			if _, err := os.Stat(CatalogFile(out, c)); err != nil {
				add("catalog_mapping names catalog %s, which is not rendered (%s)", c, rel(out, CatalogFile(out, c)))
			}
		}
	}
	names, err := catalogNames(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	for _, c := range names {
		if _, ok := mapped[c]; !ok {
			add("catalogs/%s is rendered but no catalog_mapping names it", c)
		}
	}
	return ci, fs, nil
}

// checkBundle checks the version directory v: its name, package and contents, and, for
// the version the pull request adds (submitted), operator-sdk's validators and the
// required fields.
func checkBundle(ctx context.Context, o Options, v string, submitted bool) ([]Finding, error) {
	dir := filepath.Join(OperatorDir(o.Out), v)
	p := rel(o.Out, dir)
	var fs []Finding
	selectors := []string{"name=operatorhub", "suite=operatorframework"}
	if !submitted {
		selectors = nil
	}
	for _, selector := range selectors {
		r, err := validate.Run(ctx, dir, selector, map[string]string{"k8s-version": o.KubernetesVersion})
		if err != nil {
			return nil, err
		}
		check := "operator-sdk bundle validate --select-optional " + selector
		for _, e := range r.Errors {
			fs = append(fs, Finding{check, p, e})
		}
		for _, w := range r.Warnings {
			if selector == "name=operatorhub" && strings.Contains(w, knownSDKWarning) {
				continue
			}
			fs = append(fs, Finding{check, p, w})
		}
	}
	csvPath := filepath.Join(dir, bundle.CSVFile)
	data, err := os.ReadFile(csvPath)
	if err != nil {
		return append(fs, Finding{"layout", p, fmt.Sprintf("no CSV at %s", bundle.CSVFile)}), nil
	}
	var csv map[string]any
	if err := yaml.Unmarshal(data, &csv); err != nil {
		return append(fs, Finding{"layout", rel(o.Out, csvPath), err.Error()}), nil
	}
	if submitted {
		for _, m := range requiredFields(csv) {
			fs = append(fs, Finding{"required fields", rel(o.Out, csvPath), m})
		}
	}
	version, _ := lookup(csv, "spec.version").(string)
	if version != v {
		fs = append(fs, Finding{"version directory", p, fmt.Sprintf("the directory is %s, the CSV's spec.version %q", v, version)})
	}
	if name, _ := lookup(csv, "metadata.name").(string); name != bundle.PackageName+".v"+version {
		fs = append(fs, Finding{"operator name", rel(o.Out, csvPath), fmt.Sprintf("CSV name %q is not %s.v<version>", name, bundle.PackageName)})
	}
	if pkg, err := annotationsPackage(dir); err != nil {
		fs = append(fs, Finding{"operator name", p, err.Error()})
	} else if pkg != bundle.PackageName {
		fs = append(fs, Finding{"operator name", p, fmt.Sprintf("annotations.yaml names package %q, the directory %s", pkg, bundle.PackageName)})
	}
	np, err := networkPolicies(dir)
	if err != nil {
		return nil, err
	}
	for _, f := range np {
		fs = append(fs, Finding{"NetworkPolicy", rel(o.Out, f), "a bundle may not hold a NetworkPolicy: OLM does not install or manage them"})
	}
	return fs, nil
}

var (
	capabilities = []string{"Basic Install", "Seamless Upgrades", "Full Lifecycle", "Deep Insights", "Auto Pilot"}
	categories   = []string{"AI/Machine Learning", "Application Runtime", "Big Data", "Cloud Provider", "Developer Tools",
		"Database", "Drivers and plugins", "Integration & Delivery", "Logging & Tracing", "Modernization & Migration",
		"Monitoring", "Networking", "OpenShift Optional", "Security", "Storage", "Streaming & Messaging"}
	imageRef = regexp.MustCompile(`^([^/]+/){1,}[^/:@]+(:.+|@sha256:[0-9a-f]{64})$`)
	url      = regexp.MustCompile(`^https?://.+`)
)

// requiredFields checks the CSV's fields OperatorHub requires (operator-pipelines'
// check_required_fields, from community-operators' packaging-required-fields.md). The
// pipeline fails on some and warns on others; here every one must hold.
func requiredFields(csv map[string]any) []string {
	var out []string
	str := func(path string) (string, bool) {
		s, ok := lookup(csv, path).(string)
		return s, ok
	}
	need := func(path string, ok func(string) bool) {
		v, present := str(path)
		switch {
		case !present:
			out = append(out, "the CSV does not define "+path)
		case !ok(v):
			out = append(out, "the CSV has an invalid "+path+": "+clip(v))
		}
	}
	length := func(lo, hi int) func(string) bool {
		return func(s string) bool { n := len([]rune(s)); return n >= lo && (hi == 0 || n <= hi) }
	}
	need("metadata.annotations.capabilities", func(s string) bool { return slices.Contains(capabilities, s) })
	need("metadata.annotations.categories", func(s string) bool {
		for c := range strings.SplitSeq(s, ",") {
			if !slices.Contains(categories, strings.TrimSpace(c)) {
				return false
			}
		}
		return true
	})
	need("metadata.annotations.containerImage", imageRef.MatchString)
	need("metadata.annotations.createdAt", func(s string) bool { _, err := time.Parse(time.RFC3339, s); return err == nil })
	need("metadata.annotations.repository", url.MatchString)
	need("metadata.annotations.support", length(3, 0))
	need("metadata.annotations.description", length(10, 0))
	need("spec.displayName", length(3, 50))
	need("spec.description", length(20, 0))
	need("spec.version", func(s string) bool { _, err := semver.Parse(s); return err == nil })
	need("spec.provider.name", length(3, 0))
	if msg := iconProblem(lookup(csv, "spec.icon")); msg != "" {
		out = append(out, msg)
	}
	if !listOf(lookup(csv, "spec.maintainers"), "name", "email") {
		out = append(out, "spec.maintainers must list at least one maintainer, each with a name and an email")
	}
	if !listOf(lookup(csv, "spec.links"), "name", "url") {
		out = append(out, "spec.links must list at least one link, each with a name and a url")
	}
	if kw, ok := lookup(csv, "spec.keywords").([]any); !ok || len(kw) == 0 {
		out = append(out, "spec.keywords must list at least one keyword")
	}
	return out
}

// iconProblem says what is wrong with spec.icon, or "".
func iconProblem(v any) string {
	icons, ok := v.([]any)
	if !ok || len(icons) == 0 {
		return "spec.icon must hold an icon"
	}
	for _, i := range icons {
		m, _ := i.(map[string]any)
		data, _ := m["base64data"].(string)
		media, _ := m["mediatype"].(string)
		if !slices.Contains([]string{"image/png", "image/jpeg", "image/gif", "image/svg+xml"}, media) {
			return fmt.Sprintf("spec.icon mediatype %q is not png, jpeg, gif or svg", media)
		}
		decoded, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(data), ""))
		if err != nil || len(decoded) == 0 {
			return "spec.icon base64data is not base64 data"
		}
		if media == "image/svg+xml" && !bytes.Contains(decoded, []byte("<svg")) {
			return "spec.icon says image/svg+xml but holds no SVG"
		}
		if media == "image/png" && !bytes.HasPrefix(decoded, []byte("\x89PNG\r\n\x1a\n")) {
			return "spec.icon says image/png but holds no PNG"
		}
	}
	return ""
}

// listOf reports whether v is a non-empty list of objects that each have every key as
// a non-empty string.
func listOf(v any, keys ...string) bool {
	items, ok := v.([]any)
	if !ok || len(items) == 0 {
		return false
	}
	for _, i := range items {
		m, ok := i.(map[string]any)
		if !ok {
			return false
		}
		for _, k := range keys {
			if s, _ := m[k].(string); s == "" {
				return false
			}
		}
	}
	return true
}

func annotationsPackage(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		return "", fmt.Errorf("metadata/annotations.yaml: %w", err)
	}
	var a struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(data, &a); err != nil {
		return "", fmt.Errorf("metadata/annotations.yaml: %w", err)
	}
	return a.Annotations["operators.operatorframework.io.bundle.package.v1"], nil
}

// networkPolicies lists the manifest files of dir that hold a NetworkPolicy.
func networkPolicies(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "manifests", "*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if yaml.Unmarshal(data, &obj) == nil && obj.Kind == "NetworkPolicy" && strings.HasPrefix(obj.APIVersion, "networking.k8s.io/") {
			out = append(out, f)
		}
	}
	return out, nil
}

// checkCatalogs checks each rendered catalog: opm validate (which refuses dangling
// bundles, loops and a channel with more than one head), every replaces target present
// in its channel, no embedded manifests (catalogs of OpenShift 4.17 and later refuse
// olm.bundle.object), and that it is its template rendered from the layout's own bundle
// directories.
func checkCatalogs(ctx context.Context, out string, ci *CIConfig, vs []string) ([]Finding, error) {
	var fs []Finding
	for _, m := range ci.FBC.CatalogMapping {
		tmplPath := filepath.Join(OperatorDir(out), "catalog-templates", m.TemplateName)
		tmplData, tmplErr := os.ReadFile(tmplPath)
		for _, name := range m.CatalogNames {
			path := CatalogFile(out, name)
			p := rel(out, path)
			if _, err := os.Stat(path); err != nil {
				continue // reported with ci.yaml
			}
			invalid := catalog.Validate(ctx, filepath.Join(out, "catalogs", name))
			if invalid != nil {
				fs = append(fs, Finding{"opm validate", p, invalid.Error()})
			}
			cfg, err := catalog.Load(ctx, filepath.Dir(path))
			if err != nil {
				if invalid != nil {
					continue // opm validate said why it does not load
				}
				return nil, err
			}
			for _, msg := range missingReplaces(cfg) {
				fs = append(fs, Finding{"replaces", p, msg})
			}
			if invalid != nil {
				continue
			}
			for _, b := range cfg.Bundles {
				if catalog.EmbedsObjects(&b) {
					fs = append(fs, Finding{"olm.bundle.object", p, b.Name + " embeds its manifests; catalogs of OpenShift 4.17 and later reference bundle images only"})
				}
			}
			if tmplErr != nil {
				continue // reported with ci.yaml
			}
			msgs, err := templateProblems(ctx, out, tmplData, cfg, vs)
			if err != nil {
				return nil, err
			}
			for _, msg := range msgs {
				fs = append(fs, Finding{"catalog template", p, msg})
			}
		}
	}
	return fs, nil
}

// missingReplaces names every channel entry whose replaces target is not an entry of the
// same channel. opm validate catches most of them only as a second channel head (the
// entry the broken edge should have reached is then replaced by nothing), and not at all
// at the tail of a replaces chain, which it allows to replace a bundle the catalog does
// not hold (operator-registry's model.Channel.validateReplacesChain), or where the entry
// left out is skipped by another. The layout's catalogs hold every release it has a
// bundle directory for, so each edge must land on one of them.
func missingReplaces(cfg *declcfg.DeclarativeConfig) []string {
	var out []string
	for _, ch := range cfg.Channels {
		held := sets.New[string]()
		for _, e := range ch.Entries {
			held.Insert(e.Name)
		}
		for _, e := range ch.Entries {
			if e.Replaces != "" && !held.Has(e.Replaces) {
				out = append(out, fmt.Sprintf("channel %s: %s replaces %s, which the channel does not hold", ch.Name, e.Name, e.Replaces))
			}
		}
	}
	return out
}

// templateProblems renders the basic template as opm does, with the layout's bundle
// directories standing for the images they were built into, and compares the result
// with the rendered catalog.
func templateProblems(ctx context.Context, out string, tmplData []byte, cfg *declcfg.DeclarativeConfig, vs []string) ([]string, error) {
	var got map[string]any
	if err := yaml.Unmarshal(tmplData, &got); err != nil {
		return []string{"the template does not parse: " + err.Error()}, nil
	}
	want, err := Template(cfg)
	if err != nil {
		return nil, err
	}
	var msgs []string
	if diff := cmp.Diff(asGeneric(want), asGeneric(got)); diff != "" {
		msgs = append(msgs, "the catalog is not its template rendered (-from the catalog +template):\n"+diff)
	}
	inCatalog := sets.New[string]()
	for _, b := range cfg.Bundles {
		version, err := catalog.BundleVersion(&b)
		if err != nil {
			return nil, err
		}
		inCatalog.Insert(version)
		dir := filepath.Join(OperatorDir(out), version)
		if _, err := os.Stat(dir); err != nil {
			msgs = append(msgs, fmt.Sprintf("the catalog lists %s, which has no bundle directory", b.Name))
			continue
		}
		fresh, err := catalog.RenderBundleDirAsImage(ctx, dir, b.Image)
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("render %s: %v", rel(out, dir), err))
			continue
		}
		if diff := cmp.Diff(asGeneric(*fresh), asGeneric(b)); diff != "" {
			msgs = append(msgs, fmt.Sprintf("%s in the catalog is not the rendering of %s (-rendered +catalog):\n%s", b.Name, rel(out, dir), diff))
		}
	}
	for _, v := range vs {
		if !inCatalog.Has(v) {
			msgs = append(msgs, fmt.Sprintf("bundle directory %s is in no catalog entry", v))
		}
	}
	return msgs, nil
}

// yamllint runs yamllint, with this package's rules, on every YAML file of the layout.
func yamllint(ctx context.Context, out string) ([]Finding, error) {
	bin, err := exec.LookPath("yamllint")
	if err != nil {
		return nil, errors.New("yamllint not found: install Debian's yamllint (make operatorhub and make test install it)")
	}
	cfg := filepath.Join(out, ".yamllint")
	if err := os.WriteFile(cfg, yamllintConfig, 0o600); err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(cfg) }()
	cmd := exec.CommandContext(ctx, bin, "--strict", "--format", "parsable", "--config-file", cfg, "operators", "catalogs")
	cmd.Dir = out
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var fs []Finding
	for line := range strings.Lines(stdout.String()) {
		file, msg, ok := strings.Cut(strings.TrimSpace(line), ": ")
		if ok {
			fs = append(fs, Finding{"yamllint", file, msg})
		}
	}
	var exitErr *exec.ExitError
	if runErr != nil && (!errors.As(runErr, &exitErr) || len(fs) == 0) {
		return nil, fmt.Errorf("yamllint: %w: %s%s", runErr, stdout.String(), stderr.String())
	}
	return fs, nil
}

// lookup follows a dotted path through nested maps.
func lookup(m map[string]any, path string) any {
	var v any = m
	for k := range strings.SplitSeq(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func asGeneric(v any) any {
	data, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return err.Error()
	}
	return out
}

func rel(base, path string) string {
	r, err := filepath.Rel(base, path)
	if err != nil {
		return path
	}
	return r
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
