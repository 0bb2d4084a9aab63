package validate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"

	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
)

// maxCompressedSize leaves the bundle half of OLM's 1 MiB limit on its gzipped size.
const maxCompressedSize = 512 << 10

func report(r validate.Report) string {
	return "errors:\n  " + strings.Join(r.Errors, "\n  ") + "\nwarnings:\n  " + strings.Join(r.Warnings, "\n  ")
}

// TestBundlePassesTheOperatorHubValidators: what `operator-sdk bundle validate ./bundle
// --select-optional suite=operatorframework` reports must be nothing at all, with and
// without telling the deprecated-API check the Kubernetes version we test against. (make
// test also runs make bundle-validate, the same command as users type it.)
func TestBundlePassesTheOperatorHubValidators(t *testing.T) {
	t.Setenv("OPERATOR_BUNDLE_CATEGORIES", "") // the standard categories, not a custom list
	for _, values := range []map[string]string{nil, {"k8s-version": bundletest.NewestKubernetes(t)}} {
		r, err := validate.Bundle(t.Context(), bundletest.Dir(t), values)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Errors) > 0 || len(r.Warnings) > 0 {
			t.Errorf("optional values %v: %d errors, %d warnings\n%s", values, len(r.Errors), len(r.Warnings), report(r))
		}
	}
}

func TestBundleIsWellUnderTheSizeLimit(t *testing.T) {
	b, err := apimanifests.GetBundleFromDir(bundletest.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bundle: %d bytes, %d gzipped (limit 1 MiB, ours %d)", b.Size, b.CompressedSize, maxCompressedSize)
	if b.CompressedSize == 0 || b.CompressedSize > maxCompressedSize {
		t.Errorf("gzipped bundle is %d bytes; keep it under %d", b.CompressedSize, maxCompressedSize)
	}
}

// TestValidatorsCatchBrokenBundles shows the zero-findings assertion above can fail: each
// broken copy of the bundle draws, from operator-sdk, the finding OperatorHub would
// report.
func TestValidatorsCatchBrokenBundles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, dir string)
		want    string
		isError bool
	}{
		{"no icon", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { c.Spec.Icon = nil })
		}, "csv.Spec.Icon not specified", false},
		{"no minKubeVersion", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { c.Spec.MinKubeVersion = "" })
		}, "minKubeVersion is not informed", false},
		{"a maintainer without email", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { c.Spec.Maintainers[0].Email = "" })
		}, "Maintainers elements should contain both name and email", true},
		{"a non-standard category", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { c.Annotations["categories"] = "Buckets" })
		}, "not in the set of standard categories", true},
		{"no resource requests", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) {
				c.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Resources.Requests = nil
			})
		}, "resource requests", false},
		{"a conversion webhook with a single-namespace install mode", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) {
				path := "/convert"
				c.Spec.WebhookDefinitions = []operatorsv1alpha1.WebhookDescription{{
					GenerateName: "cstoragebuckets.phalanks.io", Type: operatorsv1alpha1.ConversionWebhook,
					DeploymentName: "phalanks-controller-manager", ContainerPort: 9443, WebhookPath: &path,
					ConversionCRDs: []string{"storagebuckets.phalanks.io"}, AdmissionReviewVersions: []string{"v1"},
				}}
				for i := range c.Spec.InstallModes {
					c.Spec.InstallModes[i].Supported = c.Spec.InstallModes[i].Type == operatorsv1alpha1.InstallModeTypeOwnNamespace
				}
			})
		}, "only AllNamespaces InstallModeType is supported when conversionCRDs is present", true},
		{"no annotations file", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "metadata", "annotations.yaml")); err != nil {
				t.Fatal(err)
			}
		}, "metadata not found in", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := bundletest.Copy(t)
			tc.breakIt(t, dir)
			r, err := validate.Bundle(t.Context(), dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.OK() {
				t.Fatal("the broken bundle validates cleanly")
			}
			found := r.Warnings
			if tc.isError {
				found = r.Errors
			}
			if tc.want != "" && !strings.Contains(strings.Join(found, "\n"), tc.want) {
				t.Errorf("want a finding containing %q\n%s", tc.want, report(r))
			}
		})
	}
}

// TestBundleValidateTargetFailsOnWarningsInTheValidatorsWords: make bundle-validate,
// which make test runs, fails on a bundle that draws only a warning (operator-sdk itself
// exits 0 then), and shows the validator's own line.
func TestBundleValidateTargetFailsOnWarningsInTheValidatorsWords(t *testing.T) {
	dir := bundletest.Copy(t)
	bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { c.Spec.Icon = nil })
	root := filepath.Dir(bundletest.Dir(t))
	out, err := exec.CommandContext(t.Context(), "make", "-C", root, "--no-print-directory", "bundle-validate", "BUNDLE_DIR="+dir).CombinedOutput()
	if err == nil {
		t.Fatalf("make bundle-validate passed a bundle without an icon:\n%s", out)
	}
	if !regexp.MustCompile(`level=warning msg=".*csv\.Spec\.Icon not specified"`).Match(out) {
		t.Errorf("make bundle-validate does not show operator-sdk's warning:\n%s", out)
	}

	clean, err := exec.CommandContext(t.Context(), "make", "-C", root, "--no-print-directory", "bundle-validate").CombinedOutput()
	if err != nil {
		t.Errorf("make bundle-validate fails on the committed bundle: %v\n%s", err, clean)
	}
}
