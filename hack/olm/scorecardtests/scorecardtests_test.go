package scorecardtests_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/hack/olm/internal/operatortest"
	"github.com/phalanks/phalanks-operator/hack/olm/scorecardtests"
	"github.com/phalanks/phalanks-operator/test/harness/crds"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// testTimeout bounds each wait for the operator inside a custom test.
const testTimeout = 2 * time.Minute

// TestCustomScorecardTests runs every custom test of the bundle's scorecard configuration,
// with the test binary the custom test image ships, against an API server where the
// operator runs as OLM would start it from the bundle; each must print a passing
// v1alpha3.TestStatus and nothing else.
// The manager binary the tests build is removed after them.
func TestMain(m *testing.M) { os.Exit(operatortest.Main(m)) }

func TestCustomScorecardTests(t *testing.T) {
	ctx := t.Context()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bundleDir := filepath.Join(root, "bundle")
	b, err := apimanifests.GetBundleFromDir(bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	names := customTests(t, bundleDir)

	env := operatortest.StartEnv(t)
	op := operatortest.Prepare(t)
	var bundleCRDs []*apiextensionsv1.CustomResourceDefinition
	bundleCRDs = append(bundleCRDs, b.V1CRDs...)
	if err := crds.Install(ctx, env.Client, bundleCRDs, op.Webhook); err != nil {
		t.Fatal(err)
	}
	op.Start(ctx, t, env, b.CSV)

	binary := buildTestBinary(t)
	kubeconfig, err := env.KubeconfigUser("scorecard", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scorecard"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			result := runCustomTest(t, binary, kubeconfigPath, bundleDir, ns.Name, name, testTimeout)
			if result.State != scapiv1alpha3.PassState {
				t.Fatalf("%s: state %s, errors %v; log:\n%s", name, result.State, result.Errors, result.Log)
			}
			t.Logf("passed; log:\n%s", result.Log)
			for _, s := range result.Suggestions {
				t.Logf("suggestion: %s", s)
			}
		})
	}
}

// customTests returns the custom suite's test names from the bundle's scorecard
// configuration, and checks that the binary implements exactly those.
func customTests(t *testing.T, bundleDir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundleDir, "tests", "scorecard", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg scapiv1alpha3.Configuration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, stage := range cfg.Stages {
		for _, test := range stage.Tests {
			if test.Labels["suite"] != "custom" {
				continue
			}
			if len(test.Entrypoint) != 2 || test.Entrypoint[0] != "phalanks-scorecard-tests" {
				t.Fatalf("custom test entrypoint %v: want [phalanks-scorecard-tests NAME]", test.Entrypoint)
			}
			names = append(names, test.Entrypoint[1])
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, scorecardtests.Names()) {
		t.Fatalf("the scorecard configuration runs custom tests %v, the binary implements %v", names, scorecardtests.Names())
	}
	return names
}

func buildTestBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "phalanks-scorecard-tests")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/phalanks-scorecard-tests")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build phalanks-scorecard-tests: %v\n%s", err, b)
	}
	return out
}

// runCustomTest runs the binary as the scorecard runs it in a pod, and returns its one
// result; anything on stdout besides the JSON TestStatus, or on stderr, fails the test.
func runCustomTest(t *testing.T, binary, kubeconfig, bundleDir, namespace, name string, timeout time.Duration) scapiv1alpha3.TestResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "--bundle", bundleDir, "--kubeconfig", kubeconfig, "--timeout", timeout.String(), name)
	cmd.Env = append(os.Environ(), "SCORECARD_NAMESPACE="+namespace, "KUBECONFIG=")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", name, err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("%s wrote to stderr, which the scorecard reads as part of the result:\n%s", name, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	var status scapiv1alpha3.TestStatus
	if err := dec.Decode(&status); err != nil {
		t.Fatalf("%s: stdout is not a TestStatus: %v", name, err)
	}
	if dec.More() {
		t.Fatalf("%s: stdout holds more than the TestStatus", name)
	}
	if len(status.Results) != 1 || status.Results[0].Name != name {
		t.Fatalf("%s: want one result named %s, got %+v", name, name, status.Results)
	}
	return status.Results[0]
}
