package scorecard_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"

	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/hack/olm/scorecard"
)

// TestBundlePassesTheBuiltinScorecardTests runs the basic and olm suites on bundle/. Beyond
// the scorecard's own verdict, the basic suite must not even suggest anything: a passing
// basic-check-spec with a suggestion means an example without spec.
func TestBundlePassesTheBuiltinScorecardTests(t *testing.T) {
	dir := bundletest.Dir(t)
	for _, name := range scorecard.Builtin {
		t.Run(name, func(t *testing.T) {
			r := scorecard.Run(name, dir)
			if r.State != scapiv1alpha3.PassState {
				t.Fatalf("state %s\nerrors: %v\nsuggestions: %v\nlog: %s", r.State, r.Errors, r.Suggestions, r.Log)
			}
			if name == scorecard.BasicCheckSpec && len(r.Suggestions) > 0 {
				t.Fatalf("suggestions: %v", r.Suggestions)
			}
			if len(r.Suggestions) > 0 {
				t.Logf("suggestions: %v", r.Suggestions)
			}
		})
	}
}

// editExamples rewrites the alm-examples of a bundle copy.
func editExamples(t *testing.T, dir string, edit func(examples []map[string]any) []map[string]any) {
	t.Helper()
	bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) {
		var examples []map[string]any
		if err := json.Unmarshal([]byte(c.Annotations["alm-examples"]), &examples); err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(edit(examples))
		if err != nil {
			t.Fatal(err)
		}
		c.Annotations["alm-examples"] = string(data)
	})
}

func ownedStorageBucket(c *operatorsv1alpha1.ClusterServiceVersion) *operatorsv1alpha1.CRDDescription {
	for i, o := range c.Spec.CustomResourceDefinitions.Owned {
		if o.Kind == "StorageBucket" {
			return &c.Spec.CustomResourceDefinitions.Owned[i]
		}
	}
	return nil
}

// TestBuiltinScorecardTestsFailOnBrokenBundles breaks a copy of the bundle the way each
// test is there to catch, and requires that test to fail (or, where the scorecard-test
// image is lenient, to report exactly the suggestion it reports).
func TestBuiltinScorecardTestsFailOnBrokenBundles(t *testing.T) {
	for _, tc := range []struct {
		test           string
		how            string
		breakIt        func(t *testing.T, dir string)
		wantState      scapiv1alpha3.State
		wantSuggestion string
	}{
		{scorecard.BasicCheckSpec, "alm-examples that do not parse", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { c.Annotations["alm-examples"] = "[{" })
		}, scapiv1alpha3.FailState, ""},
		{scorecard.BasicCheckSpec, "an example without spec (the image passes it with a suggestion)", func(t *testing.T, dir string) {
			editExamples(t, dir, func(ex []map[string]any) []map[string]any {
				delete(ex[0], "spec")
				return ex
			})
		}, scapiv1alpha3.PassState, "spec missing from"},
		{scorecard.OLMBundleValidation, "no metadata directory", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "metadata")); err != nil {
				t.Fatal(err)
			}
		}, scapiv1alpha3.FailState, ""},
		{scorecard.OLMBundleValidation, "a CSV without install modes", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { c.Spec.InstallModes = nil })
		}, scapiv1alpha3.FailState, ""},
		{scorecard.OLMCRDsHaveValidation, "an example with a spec field the CRD does not declare", func(t *testing.T, dir string) {
			editExamples(t, dir, func(ex []map[string]any) []map[string]any {
				ex[0]["spec"].(map[string]any)["notInTheSchema"] = true
				return ex
			})
		}, scapiv1alpha3.FailState, "notInTheSchema"},
		{scorecard.OLMCRDsHaveResources, "an owned CRD without resources", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { ownedStorageBucket(c).Resources = nil })
		}, scapiv1alpha3.FailState, ""},
		{scorecard.OLMSpecDescriptors, "a spec field of an example without descriptor", func(t *testing.T, dir string) {
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) {
				o := ownedStorageBucket(c)
				var kept []operatorsv1alpha1.SpecDescriptor
				for _, d := range o.SpecDescriptors {
					if d.Path != "endpoint" {
						kept = append(kept, d)
					}
				}
				o.SpecDescriptors = kept
			})
		}, scapiv1alpha3.FailState, "Add a spec descriptor for endpoint"},
		{scorecard.OLMSpecDescriptors, "an example of a kind the CSV does not own", func(t *testing.T, dir string) {
			editExamples(t, dir, func(ex []map[string]any) []map[string]any {
				ex[0]["apiVersion"] = "phalanks.io/v9"
				return ex
			})
		}, scapiv1alpha3.FailState, ""},
		{scorecard.OLMStatusDescriptors, "an example with status and no status descriptors", func(t *testing.T, dir string) {
			editExamples(t, dir, func(ex []map[string]any) []map[string]any {
				for _, e := range ex {
					if e["kind"] == "StorageBucket" {
						e["status"] = map[string]any{"consecutiveFailures": 0}
					}
				}
				return ex
			})
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { ownedStorageBucket(c).StatusDescriptors = nil })
		}, scapiv1alpha3.FailState, ""},
	} {
		t.Run(tc.test+" with "+tc.how, func(t *testing.T) {
			dir := bundletest.Copy(t)
			tc.breakIt(t, dir)
			r := scorecard.Run(tc.test, dir)
			if r.State != tc.wantState {
				t.Errorf("state %s, want %s; errors %v", r.State, tc.wantState, r.Errors)
			}
			if tc.wantSuggestion != "" && !strings.Contains(strings.Join(r.Suggestions, "\n"), tc.wantSuggestion) {
				t.Errorf("suggestions %v, want one containing %q", r.Suggestions, tc.wantSuggestion)
			}
		})
	}
}

func TestUnknownBuiltinTestFails(t *testing.T) {
	r := scorecard.Run("olm-everything", bundletest.Dir(t))
	if r.State != scapiv1alpha3.FailState || !strings.Contains(strings.Join(r.Errors, ""), scorecard.OLMBundleValidation) {
		t.Errorf("state %s errors %v, want a failure listing the valid tests", r.State, r.Errors)
	}
}
