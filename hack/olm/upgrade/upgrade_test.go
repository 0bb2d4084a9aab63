package upgrade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/operatortest"
	"github.com/phalanks/phalanks-operator/hack/olm/upgrade"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// previousRelease returns the CRDs and CSV of the release the current bundle replaces in
// the committed catalog. The catalog references that release's bundle image; the image is
// built from the released bundle directory (catalog.ReleaseDir), which
// catalog.TestReleasesAreTheirBundleImages proves holds exactly what the catalog names.
func previousRelease(t *testing.T, root string, current *apimanifests.Bundle) (string, []*apiextensionsv1.CustomResourceDefinition, *operatorsv1alpha1.ClusterServiceVersion) {
	t.Helper()
	cfg, err := catalog.Load(t.Context(), catalog.PackageDir(root))
	if err != nil {
		t.Fatal(err)
	}
	if head := catalog.Head(cfg); head != current.CSV.Name {
		t.Fatalf("the catalog's head is %q, bundle/ is %q: run `make catalog`", head, current.CSV.Name)
	}
	prevName := catalog.Replaced(cfg, current.CSV.Name)
	if prevName == "" {
		t.Fatalf("%s replaces nothing in the catalog: there is no previous release to upgrade from", current.CSV.Name)
	}
	var version string
	for i := range cfg.Bundles {
		if cfg.Bundles[i].Name == prevName {
			if version, err = catalog.BundleVersion(&cfg.Bundles[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	released, err := apimanifests.GetBundleFromDir(filepath.Join(root, catalog.ReleaseDir(version)))
	if err != nil {
		t.Fatal(err)
	}
	crdList := released.V1CRDs
	csv := released.CSV
	if csv == nil || len(crdList) == 0 || csv.Name != prevName {
		t.Fatalf("the released bundle of %s (%s) has no CSV of that name or no CRDs", prevName, catalog.ReleaseDir(version))
	}
	return prevName, crdList, csv
}

// TestUpgradeFromThePreviousRelease installs the previous release's CRDs, creates an
// object of every version they serve, and checks OLM's rules before and after replacing
// them with the current bundle's CRDs.
// The manager binary the tests build is removed after them.
func TestMain(m *testing.M) { os.Exit(operatortest.Main(m)) }

func TestUpgradeFromThePreviousRelease(t *testing.T) {
	ctx := t.Context()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	current, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	prevName, prevCRDs, prevCSV := previousRelease(t, root, current)
	t.Logf("upgrading from %s to %s", prevName, current.CSV.Name)

	env := operatortest.StartEnv(t)
	op := operatortest.Prepare(t)
	if err := crds.Install(ctx, env.Client, prevCRDs, op.Webhook); err != nil {
		t.Fatal(err)
	}
	// The operator built from this tree cannot run on the previous release's CRDs when
	// they lack the versions it watches. It starts before the upgrade only when those CRDs
	// need its conversion webhook to create objects in every served version, and
	// (re)starts after the upgrade, as the new release's pods would.
	started := false
	if needsConversion(prevCRDs) {
		op.Start(ctx, t, env, current.CSV)
		started = true
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "upgrade"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	created := createEveryServedVersion(t, env.Client, ns.Name, prevCRDs, prevCSV)

	// The checks below can fail: a CRD that drops a stored version, or whose schema the
	// existing objects no longer meet, is caught.
	for _, next := range current.V1CRDs {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: next.Name}, live); err != nil {
			continue
		}
		if err := upgrade.StoredVersionsKept(live, withoutVersions(next, live.Status.StoredVersions)); err == nil {
			t.Errorf("%s: a new CRD without the stored versions %v passed the stored-versions check", next.Name, live.Status.StoredVersions)
		}
		if err := upgrade.ExistingObjectsValid(ctx, env.Client, live, requiringNewField(next)); err == nil {
			t.Errorf("%s: a new schema that requires a field no object has passed the existing-objects check", next.Name)
		}
	}

	for _, next := range current.V1CRDs {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: next.Name}, live); err != nil {
			t.Logf("%s is new in %s", next.Name, current.CSV.Name)
			continue
		}
		if err := upgrade.StoredVersionsKept(live, next); err != nil {
			t.Error(err)
		}
		if err := upgrade.ExistingObjectsValid(ctx, env.Client, live, next); err != nil {
			t.Error(err)
		}
		t.Logf("%s: stored versions %v kept, existing objects valid against the new schemas", next.Name, live.Status.StoredVersions)
	}
	if t.Failed() {
		t.FailNow()
	}

	// OLM applies the new CRDs, then rolls out the new release's Deployment.
	if err := crds.Install(ctx, env.Client, current.V1CRDs, op.Webhook); err != nil {
		t.Fatalf("apply the new CRDs: %v", err)
	}
	if started {
		op.Restart(t)
	} else {
		op.Start(ctx, t, env, current.CSV)
	}
	for _, next := range current.V1CRDs {
		live := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: next.Name}, live); err != nil {
			t.Fatal(err)
		}
		if err := upgrade.StoredVersionsKept(live, next); err != nil {
			t.Errorf("after the upgrade: %v", err)
		}
		// The operator migrates objects stored in an older version to the storage version
		// and then lists only that one (docs/api-versions.md), so a later release may stop
		// serving the old version.
		storage := storageVersion(next)
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := env.Client.Get(ctx, client.ObjectKey{Name: next.Name}, live); err != nil {
				return false, nil //nolint:nilerr // keep polling through transient errors
			}
			return slices.Equal(live.Status.StoredVersions, []string{storage}), nil
		})
		if err != nil {
			t.Errorf("%s: status.storedVersions is %v, not [%s], three minutes after the upgrade: the storage migration did not finish", next.Name, live.Status.StoredVersions, storage)
		} else {
			t.Logf("%s: status.storedVersions is [%s] after the upgrade", next.Name, storage)
		}
		for _, obj := range created {
			if obj.GroupVersionKind().Group != next.Spec.Group || obj.GetKind() != next.Spec.Names.Kind {
				continue
			}
			for _, v := range next.Spec.Versions {
				if !v.Served {
					continue
				}
				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(schema.GroupVersionKind{Group: next.Spec.Group, Version: v.Name, Kind: next.Spec.Names.Kind})
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
					t.Errorf("after the upgrade, %s %s (created as %s) does not read as %s: %v", obj.GetKind(), obj.GetName(), obj.GetAPIVersion(), v.Name, err)
				}
			}
		}
	}
}

// createEveryServedVersion creates the previous release's examples, one object per example,
// and fails when a served version has none.
func createEveryServedVersion(t *testing.T, c client.Client, ns string, crdList []*apiextensionsv1.CustomResourceDefinition, csv *operatorsv1alpha1.ClusterServiceVersion) []*unstructured.Unstructured {
	t.Helper()
	var examples []*unstructured.Unstructured
	var raw []map[string]any
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &raw); err != nil {
		t.Fatalf("previous release's alm-examples: %v", err)
	}
	for _, m := range raw {
		examples = append(examples, &unstructured.Unstructured{Object: m})
	}
	var created []*unstructured.Unstructured
	for _, crd := range crdList {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			n := 0
			for _, ex := range examples {
				if ex.GroupVersionKind() != gvk {
					continue
				}
				obj := ex.DeepCopy()
				obj.SetNamespace(ns)
				obj.SetName(fmt.Sprintf("%s-%s", ex.GetName(), strings.ToLower(v.Name)))
				if err := c.Create(t.Context(), obj); err != nil {
					t.Fatalf("create %s %s as %s: %v", gvk.Kind, obj.GetName(), v.Name, err)
				}
				created = append(created, obj)
				n++
			}
			if n == 0 {
				t.Fatalf("the previous release has no example of %s to create", gvk)
			}
		}
	}
	return created
}

// withoutVersions returns a copy of crd whose versions exclude the named ones (keeping a
// renamed copy of the first when nothing would remain).
func withoutVersions(crd *apiextensionsv1.CustomResourceDefinition, drop []string) *apiextensionsv1.CustomResourceDefinition {
	out := crd.DeepCopy()
	out.Spec.Versions = nil
	for _, v := range crd.Spec.Versions {
		if !slices.Contains(drop, v.Name) {
			out.Spec.Versions = append(out.Spec.Versions, v)
		}
	}
	if len(out.Spec.Versions) == 0 {
		v := *crd.Spec.Versions[0].DeepCopy()
		v.Name = "v9"
		out.Spec.Versions = append(out.Spec.Versions, v)
	}
	return out
}

// requiringNewField returns a copy of crd whose every version requires a spec field that
// no existing object sets.
func requiringNewField(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	out := crd.DeepCopy()
	for i := range out.Spec.Versions {
		props := out.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties
		spec := props["spec"]
		spec.Properties["addedInTheNewRelease"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		spec.Required = append(spec.Required, "addedInTheNewRelease")
		props["spec"] = spec
	}
	return out
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// needsConversion reports whether any of the CRDs has more than one version: bundle CRDs
// carry no conversion stanza, and crds.Install (as OLM does) points those at the
// operator's conversion webhook.
func needsConversion(crdList []*apiextensionsv1.CustomResourceDefinition) bool {
	for _, crd := range crdList {
		if len(crd.Spec.Versions) > 1 {
			return true
		}
	}
	return false
}
