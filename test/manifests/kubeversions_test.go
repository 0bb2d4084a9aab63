package manifests_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// testedVersions returns the oldest and newest Kubernetes minor versions ("1.29", "1.37")
// the suites run on: the set the Makefile names KUBE_OLDEST, and the default kube set.
func testedVersions(t *testing.T, root string) (oldest, newest string) {
	t.Helper()
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUBE_OLDEST := kube-(1\.\d+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no KUBE_OLDEST := kube-<minor>")
	}
	minorOf := func(set string) string {
		t.Setenv(tools.EnvKubeTools, set)
		v, _, err := tools.KubeWant()
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
		return parts[0] + "." + parts[1]
	}
	oldest, newest = minorOf("kube-"+string(m[1])), minorOf("")
	if oldest != string(m[1]) {
		t.Fatalf("set kube-%s pins Kubernetes %s", m[1], oldest)
	}
	return oldest, newest
}

func minKubeVersion(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var csv struct {
		Spec struct {
			MinKubeVersion string `json:"minKubeVersion"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &csv); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return csv.Spec.MinKubeVersion
}

// The versions the CSV, the README, the versions page and the OperatorHub checks claim
// are the versions the suites run on: minKubeVersion is the oldest one, OperatorHub's
// validators check against the newest (the Makefile's OPERATORHUB_K8S_VERSION, which
// hack/olm's tests read too, and docs/olm.md's k8s-version), and the docs name both ends.
func TestClaimedKubernetesVersionsAreTheTestedOnes(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	oldest, newest := testedVersions(t, root)
	for _, csv := range []string{
		"config/manifests/bases/phalanks-operator.clusterserviceversion.yaml",
		"bundle/manifests/phalanks-operator.clusterserviceversion.yaml",
	} {
		if got := minKubeVersion(t, filepath.Join(root, csv)); got != oldest+".0" {
			t.Errorf("%s: minKubeVersion %q, but the oldest version the suites run on is %s", csv, got, oldest)
		}
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^OPERATORHUB_K8S_VERSION \?= (\S+)$`).FindSubmatch(makefile); m == nil || string(m[1]) != newest {
		t.Errorf("the Makefile's OPERATORHUB_K8S_VERSION (the Kubernetes OperatorHub's validators check against) is %q, "+
			"not %s, the newest version the suites run on", m, newest)
	}
	// docs/olm.md names the version the OperatorHub checks and tests pass to operator-sdk.
	olmDoc, err := os.ReadFile(filepath.Join(root, "docs", "olm.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`k8s-version=(1\.\d+)`).FindAllSubmatch(olmDoc, -1) {
		if string(m[1]) != newest {
			t.Errorf("docs/olm.md says %q, but the OperatorHub checks run with k8s-version=%s, the newest version the suites run on", m[0], newest)
		}
	}
	claim := "Kubernetes " + oldest + " to " + newest
	for _, doc := range []string{"README.md", "docs/kubernetes-versions.md"} {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(data)), " "), claim) {
			t.Errorf("%s does not say %q, the versions the suites run on", doc, claim)
		}
	}
}
