package catalog_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	opversion "github.com/operator-framework/api/pkg/lib/version"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/sirupsen/logrus"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func init() { logrus.SetLevel(logrus.WarnLevel) }

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestCatalogValidates runs what `opm validate catalog` runs on the committed catalog.
func TestCatalogValidates(t *testing.T) {
	if err := catalog.Validate(t.Context(), filepath.Join(repoRoot(t), catalog.Dir)); err != nil {
		t.Fatalf("opm validate: %v", err)
	}
}

// TestCatalogHeadIsTheCurrentBundleImage: the channel head is the bundle image built
// from bundle/ (its released copy once the version is released), referenced by digest,
// exactly as `opm render --migrate-level=bundle-object-to-csv-metadata` renders it (make
// catalog after make bundle); no entry embeds its manifests; the package defaults to the
// stable channel.
func TestCatalogHeadIsTheCurrentBundleImage(t *testing.T) {
	ctx := t.Context()
	root := repoRoot(t)
	cfg, err := catalog.Load(ctx, catalog.PackageDir(root))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Packages) != 1 || cfg.Packages[0].Name != bundle.PackageName || cfg.Packages[0].DefaultChannel != bundle.Channel {
		t.Fatalf("packages %+v, want %s with default channel %s", cfg.Packages, bundle.PackageName, bundle.Channel)
	}
	current, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	head := catalog.Head(cfg)
	if head != current.CSV.Name {
		t.Fatalf("channel head %s, bundle/ is %s: run `make catalog`", head, current.CSV.Name)
	}
	dir := bundle.Dir
	if released := catalog.ReleaseDir(current.CSV.Spec.Version.String()); exists(filepath.Join(root, released)) {
		dir = released
	}
	for _, b := range cfg.Bundles {
		if catalog.EmbedsObjects(&b) {
			t.Errorf("%s embeds its manifests (olm.bundle.object): the catalog references bundle images", b.Name)
		}
		if b.Name == head {
			requireBundleImage(t, root, dir, b)
		}
	}
}

// TestReleasesAreTheirBundleImages: every release below the head references, by digest,
// the bundle image built from its released bundle directory, rendered as opm renders it.
func TestReleasesAreTheirBundleImages(t *testing.T) {
	ctx := t.Context()
	root := repoRoot(t)
	cfg, err := catalog.Load(ctx, catalog.PackageDir(root))
	if err != nil {
		t.Fatal(err)
	}
	head := catalog.Head(cfg)
	if len(cfg.Bundles) < 2 {
		t.Fatalf("the catalog holds %d releases; the previous release must stay in it", len(cfg.Bundles))
	}
	for _, b := range cfg.Bundles {
		if b.Name == head {
			continue
		}
		version, err := catalog.BundleVersion(&b)
		if err != nil {
			t.Fatal(err)
		}
		requireBundleImage(t, root, catalog.ReleaseDir(version), b)
	}
}

// requireBundleImage requires entry to name, by digest, the bundle image built from dir
// (relative to root), and to be that image's rendering.
func requireBundleImage(t *testing.T, root, dir string, entry declcfg.Bundle) {
	t.Helper()
	ref, err := name.ParseReference(entry.Image)
	if err != nil {
		t.Fatalf("%s: image %q: %v", entry.Name, entry.Image, err)
	}
	if _, ok := ref.(name.Digest); !ok {
		t.Fatalf("%s references %s by tag, not by digest", entry.Name, entry.Image)
	}
	spec, err := images.Bundle(images.Params{Root: root}, dir)
	if err != nil {
		t.Fatal(err)
	}
	img, err := (&images.Builder{Root: root, WorkDir: t.TempDir()}).Build(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if want := ref.Context().Digest(digest.String()).String(); entry.Image != want {
		t.Fatalf("%s references %s; the bundle image built from %s is %s: run `make catalog`", entry.Name, entry.Image, dir, want)
	}
	fresh, err := catalog.RenderBundleDirAsImage(t.Context(), filepath.Join(root, dir), entry.Image)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(asJSON(t, *fresh), asJSON(t, entry)); diff != "" {
		t.Errorf("the catalog's %s is not the rendering of its bundle image (%s): run `make catalog` (-rendered +catalog):\n%s", entry.Name, dir, diff)
	}
}

// asJSON is an olm.bundle as generic JSON, so property values compare by content.
func asJSON(t *testing.T, b declcfg.Bundle) any {
	t.Helper()
	var buf bytes.Buffer
	if err := declcfg.WriteJSON(declcfg.DeclarativeConfig{Bundles: []declcfg.Bundle{b}}, &buf); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// TestTwoReleaseCatalogUpgradeEdge renders the current tree at two versions into a new
// catalog and checks the upgrade edge OLM follows: the newer release replaces the older,
// skips everything below it, and is the channel head; the result validates like the
// committed catalog.
func TestTwoReleaseCatalogUpgradeEdge(t *testing.T) {
	ctx := t.Context()
	cfg := &declcfg.DeclarativeConfig{}
	for _, version := range []string{"1.4.0", "1.5.0"} {
		dir := writeBundle(t, version)
		b, err := catalog.RenderBundle(ctx, dir, "registry.example.com/phalanks-operator-bundle:v"+version)
		if err != nil {
			t.Fatal(err)
		}
		if err := catalog.AddHead(cfg, b, nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	catalogRoot := t.TempDir()
	if err := catalog.Write(filepath.Join(catalogRoot, bundle.PackageName), cfg); err != nil {
		t.Fatal(err)
	}
	if err := catalog.Validate(ctx, catalogRoot); err != nil {
		t.Fatalf("opm validate: %v", err)
	}
	loaded, err := catalog.Load(ctx, filepath.Join(catalogRoot, bundle.PackageName))
	if err != nil {
		t.Fatal(err)
	}
	model, err := declcfg.ConvertToModel(*loaded)
	if err != nil {
		t.Fatal(err)
	}
	ch := model[bundle.PackageName].Channels[bundle.Channel]
	head, err := ch.Head()
	if err != nil {
		t.Fatal(err)
	}
	if head.Name != "phalanks-operator.v1.5.0" || head.Replaces != "phalanks-operator.v1.4.0" {
		t.Fatalf("head %s replaces %q, want v1.5.0 replacing v1.4.0", head.Name, head.Replaces)
	}
	var skipRange string
	for _, e := range loaded.Channels[0].Entries {
		if e.Name == head.Name {
			skipRange = e.SkipRange
		}
	}
	r, err := semver.ParseRange(skipRange)
	if err != nil {
		t.Fatalf("skipRange %q: %v", skipRange, err)
	}
	if !r(semver.MustParse("1.4.0")) || r(semver.MustParse("1.5.0")) {
		t.Errorf("skipRange %q must cover 1.4.0 and not 1.5.0", skipRange)
	}
	if bundleVersion(t, head.Name, loaded) != "1.5.0" {
		t.Errorf("head's olm.package version is not 1.5.0")
	}
}

// TestAddHeadKeepsHistory: regenerating the head replaces it in place, while an older or
// already superseded version is refused.
func TestAddHeadKeepsHistory(t *testing.T) {
	ctx := t.Context()
	render := func(version string) *declcfg.Bundle {
		b, err := catalog.RenderBundle(ctx, writeBundle(t, version), "")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cfg := &declcfg.DeclarativeConfig{}
	for _, v := range []string{"2.0.0", "2.1.0", "2.1.0"} {
		if err := catalog.AddHead(cfg, render(v), nil, ""); err != nil {
			t.Fatalf("add %s: %v", v, err)
		}
	}
	if len(cfg.Bundles) != 2 || len(cfg.Channels[0].Entries) != 2 || catalog.Head(cfg) != "phalanks-operator.v2.1.0" {
		t.Fatalf("after re-adding the head: bundles %d, entries %+v", len(cfg.Bundles), cfg.Channels[0].Entries)
	}
	if err := catalog.AddHead(cfg, render("2.0.0"), nil, ""); err == nil {
		t.Error("re-adding a superseded release succeeded")
	}
	if err := catalog.AddHead(cfg, render("1.9.0"), nil, ""); err == nil {
		t.Error("adding a version older than the head succeeded")
	}
}

// writeBundle copies the committed bundle as the given version: what the catalog
// logic reads of a bundle is its CSV's name, version and package.
func writeBundle(t *testing.T, version string) string {
	t.Helper()
	dir := bundletest.Copy(t)
	bundletest.EditCSV(t, dir, func(csv *operatorsv1alpha1.ClusterServiceVersion) {
		csv.Name = bundle.PackageName + ".v" + version
		csv.Spec.Version = opversion.OperatorVersion{Version: semver.MustParse(version)}
	})
	if _, err := apimanifests.GetBundleFromDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func bundleVersion(t *testing.T, name string, cfg *declcfg.DeclarativeConfig) string {
	t.Helper()
	for _, b := range cfg.Bundles {
		if b.Name != name {
			continue
		}
		for _, p := range b.Properties {
			if p.Type == property.TypePackage {
				var pkg property.Package
				if err := json.Unmarshal(p.Value, &pkg); err != nil {
					t.Fatal(err)
				}
				return pkg.Version
			}
		}
	}
	return ""
}
