package olm_test

import (
	"os"
	"path/filepath"
	"regexp"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/test/olm"
)

// scorecardNamespace and its service account are the ones docs/install-olm.md sets up for the
// custom tests.
const scorecardNamespace = "scorecard"

// itRunsTheScorecard runs `operator-sdk scorecard` on the installed release's bundle as
// docs/install-olm.md gives it: every built-in test (from the scorecard-test image, served here
// under operator-sdk's name) and every custom test (from the release's scorecard-test
// image) as pods on the node. It also shows that a failing test fails the run.
func itRunsTheScorecard() {
	It("runs operator-sdk scorecard on the bundle: every built-in and custom test runs as a pod and passes", func() {
		By("creating the namespace, service account and RBAC docs/install-olm.md gives for the custom tests")
		kubectl("create", "namespace", scorecardNamespace)
		rbac := filepath.Join(dir, "scorecard-rbac.yaml")
		Expect(os.WriteFile(rbac, []byte(docsYAMLBlock("`operator-sdk scorecard` in CI")), 0o600)).To(Succeed())
		kubectl("apply", "-f", rbac)

		sc := &olm.Scorecard{Kubeconfig: local.Kubeconfig, Namespace: scorecardNamespace, ServiceAccount: "scorecard", UntarImage: untarImage}
		res, err := sc.Run(ctx, current.BundleDir)
		check(err)
		GinkgoWriter.Printf("operator-sdk scorecard:\n%s\n", res.Output)
		Expect(olm.Failures(res.Tests)).To(BeEmpty())
		Expect(res.ExitCode).To(BeZero())

		configured, err := scorecardTests(current.BundleDir)
		check(err)
		var ran []string
		for _, t := range res.Tests.Items {
			ran = append(ran, t.Spec.Labels["test"])
		}
		Expect(ran).To(ConsistOf(configured), "every test of the bundle's configuration ran")
		Expect(configured).To(ContainElements("basic-check-spec-test", "olm-bundle-validation-test", "olm-crds-have-validation-test",
			"olm-crds-have-resources-test", "olm-spec-descriptors-test", "olm-status-descriptors-test"), "the built-in suites")
		Expect(configured).To(ContainElements("served-versions-test", "foo-creates-deployment-test", "storagebucket-terminal-condition-test"), "the custom suite")

		By("failing the run, exit code 1, when a test fails")
		broken := withFailingTest(current.BundleDir, current.ScorecardImage)
		res, err = sc.Run(ctx, broken, "--selector", "test=no-such-test-test")
		check(err)
		Expect(res.ExitCode).To(Equal(1), "operator-sdk scorecard output:\n%s", res.Output)
		Expect(olm.Failures(res.Tests)).To(ContainElement(MatchRegexp(`fail|error`)))
		Expect(res.Output).To(MatchRegexp(regexp.QuoteMeta("no-such-test")))
	})
}

// scorecardTests returns the test labels of a bundle's scorecard configuration.
func scorecardTests(bundleDir string) ([]string, error) {
	cfg, err := readScorecardConfig(bundleDir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range cfg.Stages {
		for _, t := range s.Tests {
			out = append(out, t.Labels["test"])
		}
	}
	return out, nil
}

func scorecardConfigPath(bundleDir string) string {
	return filepath.Join(bundleDir, "tests", "scorecard", "config.yaml")
}

func readScorecardConfig(bundleDir string) (*scapiv1alpha3.Configuration, error) {
	data, err := os.ReadFile(scorecardConfigPath(bundleDir))
	if err != nil {
		return nil, err
	}
	cfg := &scapiv1alpha3.Configuration{}
	return cfg, yaml.Unmarshal(data, cfg)
}

// withFailingTest copies a bundle directory and adds a custom test the test image does
// not know, labelled test=no-such-test-test; it returns the copy.
func withFailingTest(bundleDir, image string) string {
	GinkgoHelper()
	out := filepath.Join(GinkgoT().TempDir(), "bundle")
	Expect(os.CopyFS(out, os.DirFS(bundleDir))).To(Succeed())
	cfg, err := readScorecardConfig(out)
	check(err)
	last := &cfg.Stages[len(cfg.Stages)-1]
	last.Tests = append(last.Tests, scapiv1alpha3.TestConfiguration{
		Image:      image,
		Entrypoint: []string{"phalanks-scorecard-tests", "no-such-test"},
		Labels:     map[string]string{"suite": "custom", "test": "no-such-test-test"},
	})
	data, err := yaml.Marshal(cfg)
	check(err)
	Expect(os.WriteFile(scorecardConfigPath(out), data, 0o600)).To(Succeed())
	return out
}
