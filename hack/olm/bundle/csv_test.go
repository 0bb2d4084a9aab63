package bundle_test

import (
	"encoding/json"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apimanifests "github.com/operator-framework/api/pkg/manifests"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// openShiftFeatures are the features.operators.openshift.io annotations the OpenShift
// console filters on and Red Hat's preflight requires, each "true" or "false".
var openShiftFeatures = []string{
	"disconnected", "fips-compliant", "proxy-aware", "tls-profiles",
	"token-auth-aws", "token-auth-azure", "token-auth-gcp", "cnf", "cni", "csi",
}

// TestTheCSVReadsRightOnOperatorHub checks what OperatorHub.io and the OpenShift console
// show of the committed CSV: each owned API version under a name of its own (the
// deprecated one marked so), examples without the scaffold's kustomize labels, a support
// address, the OpenShift feature annotations, and the status fields users read.
func TestTheCSVReadsRightOnOperatorHub(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	csv := b.CSV

	names := map[string]string{}
	for _, c := range csv.Spec.CustomResourceDefinitions.Owned {
		if other, ok := names[c.DisplayName]; ok {
			t.Errorf("%s %s and %s are both displayed %q", c.Name, c.Version, other, c.DisplayName)
		}
		names[c.DisplayName] = c.Name + " " + c.Version
		if c.Name == "storagebuckets.phalanks.io" && c.Version == "v1alpha1" && !strings.Contains(c.DisplayName, "deprecated") {
			t.Errorf("the deprecated StorageBucket v1alpha1 is displayed %q, without saying it is deprecated", c.DisplayName)
		}
		if c.Name == "storagebuckets.phalanks.io" && c.Version == "v1beta1" {
			var paths []string
			for _, d := range c.StatusDescriptors {
				paths = append(paths, d.Path)
			}
			for _, want := range []string{"conditions", "observedGeneration", "lastProbeTime", "lastSuccessTime", "consecutiveFailures"} {
				if !slices.Contains(paths, want) {
					t.Errorf("StorageBucket v1beta1 has no status descriptor for %s (it has %v)", want, paths)
				}
			}
		}
	}

	var examples []struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
		t.Fatalf("alm-examples: %v", err)
	}
	for _, e := range examples {
		for k := range e.Metadata.Labels {
			if strings.HasPrefix(k, "app.kubernetes.io/") {
				t.Errorf("example %s %s carries the label %s, which is the operator's, not the user's", e.Kind, e.Metadata.Name, k)
			}
		}
	}

	if u, err := url.Parse(csv.Annotations["support"]); err != nil || u.Scheme != "https" || u.Host == "" {
		t.Errorf("support is %q, want an https address users can reach", csv.Annotations["support"])
	}
	for _, f := range openShiftFeatures {
		k := "features.operators.openshift.io/" + f
		if v, ok := csv.Annotations[k]; !ok || (v != "true" && v != "false") {
			t.Errorf("annotation %s is %q, want \"true\" or \"false\"", k, v)
		}
	}

	// The links and the description send users to the pages written for them, not to
	// the developers' pages.
	texts := []string{csv.Spec.Description}
	for _, l := range csv.Spec.Links {
		texts = append(texts, l.URL)
	}
	for _, text := range texts {
		for _, page := range developerPages {
			if strings.Contains(text, "docs/"+page) {
				t.Errorf("the CSV links to docs/%s, a page for the project's developers: %q", page, text)
			}
		}
	}
}

// developerPages are the docs written for the project's developers.
var developerPages = []string{"olm.md", "development.md", "benchmarks.md"}
