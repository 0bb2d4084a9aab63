package operatorhub_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/hack/olm/operatorhub"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

var (
	layoutOnce sync.Once
	layoutDir  string
	layoutErr  error
)

// layout lays the pull request out once per test binary and gives each caller a copy.
func layout(t *testing.T) operatorhub.Options {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	newest := bundletest.NewestKubernetes(t)
	layoutOnce.Do(func() {
		layoutDir, layoutErr = os.MkdirTemp("", "operatorhub-layout-")
		if layoutErr == nil {
			layoutErr = operatorhub.Layout(t.Context(), operatorhub.Options{Root: root, Out: layoutDir, KubernetesVersion: newest})
		}
	})
	if layoutErr != nil {
		t.Fatal(layoutErr)
	}
	out := filepath.Join(t.TempDir(), "pr")
	if err := os.CopyFS(out, os.DirFS(layoutDir)); err != nil {
		t.Fatal(err)
	}
	return operatorhub.Options{Root: root, Out: out, KubernetesVersion: newest}
}

func TestMain(m *testing.M) {
	// operator-registry reports optional bundle files it did not find at info level.
	logrus.SetLevel(logrus.WarnLevel)
	code := m.Run()
	if layoutDir != "" {
		_ = os.RemoveAll(layoutDir)
	}
	os.Exit(code)
}

// TestTheSubmissionPassesTheHubsChecks: the pull request make operatorhub lays out
// draws nothing from the checks OperatorHub's pipelines run.
func TestTheSubmissionPassesTheHubsChecks(t *testing.T) {
	o := layout(t)
	findings, err := operatorhub.Check(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("finding: %s", f)
	}
	for _, want := range []string{"ci.yaml", "catalog-templates/" + operatorhub.TemplateName, "0.1.0/manifests", "0.2.0/metadata/annotations.yaml"} {
		if _, err := os.Stat(filepath.Join(operatorhub.OperatorDir(o.Out), want)); err != nil {
			t.Errorf("the layout lacks %s: %v", want, err)
		}
	}
	if _, err := os.Stat(operatorhub.CatalogFile(o.Out, "v4.16")); err != nil {
		t.Errorf("no catalog for OpenShift 4.16 (Kubernetes 1.29, the CSV's minKubeVersion): %v", err)
	}
}

// TestTheChecksCatchBrokenSubmissions breaks a fresh layout in each way a hub's pipeline
// rejects, and requires the finding that names it.
func TestTheChecksCatchBrokenSubmissions(t *testing.T) {
	const head = "0.2.0"
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, out string)
		check   string
		want    string
	}{
		{"a display name of 51 characters", editCSV(head, func(c map[string]any) { spec(c)["displayName"] = strings.Repeat("x", 51) }),
			"required fields", "spec.displayName"},
		{"a description under 20 characters", editCSV(head, func(c map[string]any) { spec(c)["description"] = "Buckets." }),
			"required fields", "spec.description"},
		{"an icon that is not base64", editCSV(head, func(c map[string]any) {
			spec(c)["icon"] = []any{map[string]any{"base64data": "not base64!", "mediatype": "image/svg+xml"}}
		}), "required fields", "spec.icon"},
		{"an icon of a media type the hubs do not show", editCSV(head, func(c map[string]any) {
			icon := spec(c)["icon"].([]any)[0].(map[string]any)
			icon["mediatype"] = "image/bmp"
		}), "required fields", "spec.icon"},
		{"a maintainer without email", editCSV(head, func(c map[string]any) {
			spec(c)["maintainers"] = []any{map[string]any{"name": "Phalanks maintainers"}}
		}), "required fields", "spec.maintainers"},
		{"no links", editCSV(head, func(c map[string]any) { delete(spec(c), "links") }), "required fields", "spec.links"},
		{"no provider", editCSV(head, func(c map[string]any) { delete(spec(c), "provider") }), "required fields", "spec.provider.name"},
		{"a version that is not the directory's", editCSV(head, func(c map[string]any) { spec(c)["version"] = "0.2.5" }),
			"version directory", "the directory is 0.2.0"},
		{"a NetworkPolicy in the bundle", func(t *testing.T, out string) {
			write(t, filepath.Join(operatorhub.OperatorDir(out), head, "manifests", "deny_networking.k8s.io_v1_networkpolicy.yaml"),
				"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny\nspec:\n  podSelector: {}\n")
		}, "NetworkPolicy", "may not hold a NetworkPolicy"},
		{"a bundle in no channel", editCatalog("v4.18", func(docs []map[string]any) []map[string]any {
			for _, d := range docs {
				if d["schema"] == "olm.channel" {
					d["entries"] = d["entries"].([]any)[1:]
					d["entries"].([]any)[0].(map[string]any)["replaces"] = nil
				}
			}
			return docs
		}), "opm validate", "not found in any channel entries"},
		{"a replaces target the channel does not hold, which leaves two channel heads", editCatalog("v4.19", func(docs []map[string]any) []map[string]any {
			for _, d := range docs {
				if d["schema"] == "olm.channel" {
					d["entries"].([]any)[1].(map[string]any)["replaces"] = bundle.PackageName + ".v0.0.9"
				}
			}
			return docs
		}), "opm validate", "multiple channel heads"},
		{"a catalog its template does not render", func(t *testing.T, out string) {
			path := filepath.Join(operatorhub.OperatorDir(out), "catalog-templates", operatorhub.TemplateName)
			data := read(t, path)
			write(t, path, strings.Replace(data, "skipRange: '>=0.1.0 <0.2.0'", "skipRange: '>=0.0.1 <0.2.0'", 1))
		}, "catalog template", "is not its template rendered"},
		{"a catalog entry that is not the rendering of its bundle directory", editCSV(head, func(c map[string]any) {
			c["metadata"].(map[string]any)["annotations"].(map[string]any)["description"] = "A different description than the catalog's."
		}), "catalog template", "is not the rendering of operators/phalanks-operator/0.2.0"},
		{"manifests embedded in a catalog for OpenShift 4.17 and later", editCatalog("v4.20", func(docs []map[string]any) []map[string]any {
			for _, d := range docs {
				if d["schema"] == "olm.bundle" {
					d["properties"] = append(d["properties"].([]any), map[string]any{"type": "olm.bundle.object", "value": map[string]any{"data": "e30="}})
				}
			}
			return docs
		}), "olm.bundle.object", "embeds its manifests"},
		{"a catalog no mapping names", func(t *testing.T, out string) {
			write(t, operatorhub.CatalogFile(out, "v4.99"), read(t, operatorhub.CatalogFile(out, "v4.16")))
		}, "ci.yaml", "no catalog_mapping names it"},
		{"a template type the pipeline does not know", func(t *testing.T, out string) {
			path := filepath.Join(operatorhub.OperatorDir(out), "ci.yaml")
			write(t, path, strings.Replace(read(t, path), "olm.template.basic", "olm.template.fancy", 1))
		}, "ci.yaml", `type "olm.template.fancy"`},
		{"trailing spaces", func(t *testing.T, out string) {
			path := filepath.Join(operatorhub.OperatorDir(out), "ci.yaml")
			write(t, path, strings.Replace(read(t, path), "enabled: true\n", "enabled: true   \n", 1))
		}, "yamllint", "trailing spaces"},
		{"no final newline", func(t *testing.T, out string) {
			path := filepath.Join(operatorhub.OperatorDir(out), head, "metadata", "annotations.yaml")
			write(t, path, strings.TrimRight(read(t, path), "\n"))
		}, "yamllint", "no new line character at the end of file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := layout(t)
			tc.breakIt(t, o.Out)
			findings, err := operatorhub.Check(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range findings {
				if f.Check == tc.check && strings.Contains(f.Message, tc.want) {
					return
				}
			}
			t.Errorf("no %q finding containing %q; findings:\n%v", tc.check, tc.want, findings)
		})
	}
}

// TestAMissingReplacesTargetIsCaughtOnItsOwn breaks the replaces chain where opm validate
// allows it: the oldest entry of every catalog, and of the template they are rendered
// from, replaces a release the layout does not hold. The channel keeps exactly one head,
// so only the replaces check can report it, once per catalog, and nothing else may.
func TestAMissingReplacesTargetIsCaughtOnItsOwn(t *testing.T) {
	const tail, missing = bundle.PackageName + ".v0.1.0", bundle.PackageName + ".v0.0.9"
	o := layout(t)
	catalogs, err := filepath.Glob(operatorhub.CatalogFile(o.Out, "*"))
	if err != nil || len(catalogs) == 0 {
		t.Fatalf("no catalogs in the layout (%v)", err)
	}
	breakChannel := func(entries []any) {
		for _, e := range entries {
			if e := e.(map[string]any); e["name"] == tail {
				if e["replaces"] != nil {
					t.Fatalf("%s already replaces %v; the test needs the chain's tail", tail, e["replaces"])
				}
				e["replaces"] = missing
				return
			}
		}
		t.Fatalf("no channel entry %s", tail)
	}
	for _, c := range catalogs {
		name := filepath.Base(filepath.Dir(filepath.Dir(c)))
		editCatalog(name, func(docs []map[string]any) []map[string]any {
			for _, d := range docs {
				if d["schema"] == "olm.channel" {
					breakChannel(d["entries"].([]any))
				}
			}
			return docs
		})(t, o.Out)
	}
	tmplPath := filepath.Join(operatorhub.OperatorDir(o.Out), "catalog-templates", operatorhub.TemplateName)
	var tmpl map[string]any
	if err := yaml.Unmarshal([]byte(read(t, tmplPath)), &tmpl); err != nil {
		t.Fatal(err)
	}
	for _, d := range tmpl["entries"].([]any) {
		if d := d.(map[string]any); d["schema"] == "olm.channel" {
			breakChannel(d["entries"].([]any))
		}
	}
	data, err := yaml.Marshal(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	write(t, tmplPath, "---\n"+string(data))

	findings, err := operatorhub.Check(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := tail + " replaces " + missing + ", which the channel does not hold"
	caught := 0
	for _, f := range findings {
		if f.Check == "replaces" && strings.Contains(f.Message, want) {
			caught++
			continue
		}
		t.Errorf("a finding besides the replaces check's: %s", f)
	}
	if caught != len(catalogs) {
		t.Errorf("want the replaces finding %q once for each of the %d catalogs, got it %d times; findings:\n%v", want, len(catalogs), caught, findings)
	}
}

func spec(csv map[string]any) map[string]any { return csv["spec"].(map[string]any) }

// editCSV rewrites the CSV of a version directory through edit.
func editCSV(version string, edit func(map[string]any)) func(*testing.T, string) {
	return func(t *testing.T, out string) {
		t.Helper()
		path := filepath.Join(operatorhub.OperatorDir(out), version, bundle.CSVFile)
		var csv map[string]any
		if err := yaml.Unmarshal([]byte(read(t, path)), &csv); err != nil {
			t.Fatal(err)
		}
		edit(csv)
		data, err := yaml.Marshal(csv)
		if err != nil {
			t.Fatal(err)
		}
		write(t, path, string(data))
	}
}

// editCatalog rewrites the documents of one rendered catalog through edit.
func editCatalog(name string, edit func([]map[string]any) []map[string]any) func(*testing.T, string) {
	return func(t *testing.T, out string) {
		t.Helper()
		path := operatorhub.CatalogFile(out, name)
		var docs []map[string]any
		for doc := range strings.SplitSeq(read(t, path), "\n---\n") {
			doc = strings.TrimPrefix(doc, "---\n")
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatal(err)
			}
			docs = append(docs, m)
		}
		var b strings.Builder
		for _, d := range edit(docs) {
			data, err := yaml.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString("---\n")
			b.Write(data)
		}
		write(t, path, b.String())
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
