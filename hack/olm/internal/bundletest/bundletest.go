// Package bundletest gives tests a private copy of the repository's bundle directory to
// break on purpose, and the Kubernetes version the bundle is validated against.
package bundletest

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Dir returns the repository's bundle directory.
func Dir(t testing.TB) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, bundle.Dir)
}

// Copy copies the repository's bundle directory into a temporary directory and returns
// the copy's path.
func Copy(t testing.TB) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "bundle")
	if err := os.CopyFS(dst, os.DirFS(Dir(t))); err != nil {
		t.Fatal(err)
	}
	return dst
}

// CSVPath is the CSV file in a bundle directory.
func CSVPath(dir string) string {
	return filepath.Join(dir, "manifests", bundle.PackageName+".clusterserviceversion.yaml")
}

// EditCSV rewrites the CSV of a bundle directory through edit.
func EditCSV(t testing.TB, dir string, edit func(csv *operatorsv1alpha1.ClusterServiceVersion)) {
	t.Helper()
	data, err := os.ReadFile(CSVPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.Unmarshal(data, csv); err != nil {
		t.Fatal(err)
	}
	edit(csv)
	if data, err = yaml.Marshal(csv); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(CSVPath(dir), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// NewestKubernetes returns the newest Kubernetes minor version the operator supports, as
// the Makefile's OPERATORHUB_K8S_VERSION gives it to make operatorhub ("1.37"), so the
// tests validate against what the target does. test/manifests checks that value is the
// version the suites run on.
func NewestKubernetes(t testing.TB) string {
	t.Helper()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^OPERATORHUB_K8S_VERSION \?= (1\.\d+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no OPERATORHUB_K8S_VERSION ?= 1.<minor>")
	}
	return string(m[1])
}
