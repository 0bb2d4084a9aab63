package olmv1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/blang/semver/v4"
	. "github.com/onsi/ginkgo/v2"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
	"github.com/phalanks/phalanks-operator/test/olm"
)

const imageRegistry = "quay.io/phalanks"

// releasedBundle is a release from its released bundle directory (hack/olm/releases),
// its operator image built from the tree.
func releasedBundle(version string) (*olm.Release, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	r := &olm.Release{
		Version:        version,
		BundleDir:      filepath.Join(root, catalog.ReleaseDir(version)),
		Image:          fmt.Sprintf("%s/phalanks-operator:v%s", imageRegistry, version),
		ScorecardImage: fmt.Sprintf("%s/phalanks-operator-scorecard-tests:v%s", imageRegistry, version),
		BundleImage:    fmt.Sprintf("%s/phalanks-operator-bundle:v%s", imageRegistry, version),
	}
	b, err := apimanifests.GetBundleFromDir(r.BundleDir)
	if err != nil {
		return nil, fmt.Errorf("load the released bundle %s: %w", version, err)
	}
	r.CSV = b.CSV
	return r, nil
}

// packageRelease generates the tree's bundle as version.
func packageRelease(version semver.Version) (*olm.Release, error) {
	return olm.PackageRelease(ctx, version, filepath.Join(dir, "releases", version.String()), GinkgoWriter)
}

// newRequiredField is the field the unsafe release makes required in StorageBucket
// v1beta1's spec: no existing object has it, so upgrading to it would make every
// StorageBucket invalid.
const newRequiredField = "retentionClass"

// requireNewField turns r's StorageBucket CRD into an unsafe change: v1beta1's spec gains
// a required field.
func requireNewField(r *olm.Release) error {
	path := filepath.Join(r.BundleDir, "manifests", "phalanks.io_storagebuckets.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	changed := false
	for i, v := range versions {
		m, _ := v.(map[string]any)
		if m["name"] != "v1beta1" {
			continue
		}
		spec := []string{"schema", "openAPIV3Schema", "properties", "spec"}
		required, _, _ := unstructured.NestedStringSlice(m, append(spec, "required")...)
		if err := unstructured.SetNestedStringSlice(m, append(required, newRequiredField), append(spec, "required")...); err != nil {
			return err
		}
		if err := unstructured.SetNestedMap(m, map[string]any{"type": "string", "description": "A field no existing object has."},
			append(spec, "properties", newRequiredField)...); err != nil {
			return err
		}
		versions[i] = m
		changed = true
	}
	if !changed {
		return fmt.Errorf("%s has no v1beta1 version", path)
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		return err
	}
	out, err := yaml.Marshal(crd.Object)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

// pushImages builds and pushes every release's images, the committed catalog (which must
// reference, by digest, exactly the bundle images built here of the first and the
// committed release), the catalog that adds current to it and the one that adds unsafe
// after current, and testapp. It returns the committed catalog's deprecation message for
// the first release.
func pushImages(ctx context.Context) (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	im, err := olm.NewImages(local, filepath.Join(dir, "images"), GinkgoWriter)
	if err != nil {
		return "", err
	}
	for _, r := range []*olm.Release{first, previous, current, unsafe} {
		if err := im.PushRelease(ctx, r); err != nil {
			return "", err
		}
	}
	committed, err := catalog.Load(ctx, catalog.PackageDir(root))
	if err != nil {
		return "", err
	}
	for _, r := range []*olm.Release{first, previous} {
		if err := committedAs(committed, r); err != nil {
			return "", err
		}
	}
	if err := im.PushCatalog(ctx, filepath.Join(root, catalog.Dir), committedCatalogImage); err != nil {
		return "", err
	}
	for _, c := range []struct {
		name, image string
		add         *olm.Release
	}{{"upgrade", upgradeCatalogImage, current}, {"unsafe", unsafeCatalogImage, unsafe}} {
		pkg := committed.Packages[0]
		if err := catalog.AddHead(committed, c.add.Bundle, pkg.Icon, pkg.Description); err != nil {
			return "", err
		}
		catalogDir := filepath.Join(dir, "catalogs", c.name)
		if err := catalog.Write(filepath.Join(catalogDir, pkg.Name), committed); err != nil {
			return "", err
		}
		if err := catalog.Validate(ctx, catalogDir); err != nil {
			return "", fmt.Errorf("the %s catalog does not validate: %w", c.name, err)
		}
		if err := im.PushCatalog(ctx, catalogDir, c.image); err != nil {
			return "", err
		}
	}
	if err := im.PushTestApp(ctx, testAppImage); err != nil {
		return "", err
	}
	for _, d := range committed.Deprecations {
		for _, e := range d.Entries {
			if e.Reference.Schema == declcfg.SchemaBundle && e.Reference.Name == first.CSVName() {
				return e.Message, nil
			}
		}
	}
	return "", fmt.Errorf("the committed catalog has no olm.deprecations entry for %s", first.CSVName())
}

// committedAs checks that the committed catalog's entry of r references the bundle image
// built here, by digest: the catalog can then be served as committed.
func committedAs(cfg *declcfg.DeclarativeConfig, r *olm.Release) error {
	for _, b := range cfg.Bundles {
		if b.Name != r.CSVName() {
			continue
		}
		if b.Image != r.Bundle.Image {
			return fmt.Errorf("the committed catalog references %s as %s, but its bundle image builds as %s: run `make catalog`", r.CSVName(), b.Image, r.Bundle.Image)
		}
		return nil
	}
	return fmt.Errorf("the committed catalog has no bundle %s", r.CSVName())
}
