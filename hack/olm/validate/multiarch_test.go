package validate_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"

	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
)

// registry answers for the committed CSV's images as a registry holding the operator
// image for the given platforms would.
func registry(platforms ...v1.Platform) validate.PlatformsOf {
	return func(string) ([]v1.Platform, error) { return platforms, nil }
}

// TestBundleMeetsTheMultiarchRules: the committed bundle's labels and node affinity
// match an operator image built for images.Platforms, with no error and no warning.
// (images.TestImagesBuildPushAndPullBack checks the same against the image it pushed.)
func TestBundleMeetsTheMultiarchRules(t *testing.T) {
	r, err := validate.MultiArch(bundletest.Dir(t), registry(images.Platforms...))
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Errorf("multiarch:\n%s", report(r))
	}
}

// TestMultiarchRulesCatchMismatches: each way a bundle and its images can disagree
// draws the error or warning the validator gives.
func TestMultiarchRulesCatchMismatches(t *testing.T) {
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 := v1.Platform{OS: "linux", Architecture: "arm64"}
	s390x := v1.Platform{OS: "linux", Architecture: "s390x"}
	for name, c := range map[string]struct {
		edit      func(*operatorsv1alpha1.ClusterServiceVersion)
		platforms validate.PlatformsOf
		errors    bool
		warning   string
	}{
		"a labelled architecture the image lacks": {platforms: registry(amd64), errors: true},
		"an architecture the labels miss":         {platforms: registry(amd64, arm64, s390x), warning: "misses the label operatorframework.io/arch.s390x"},
		"no node affinity": {
			edit: func(csv *operatorsv1alpha1.ClusterServiceVersion) {
				csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Affinity = nil
			},
			platforms: registry(amd64, arm64), warning: "no node affinity",
		},
		"a node affinity wider than the image": {
			edit: func(csv *operatorsv1alpha1.ClusterServiceVersion) {
				terms := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
				terms[0].MatchExpressions[0].Values = append(terms[0].MatchExpressions[0].Values, "s390x")
			},
			platforms: registry(amd64, arm64), warning: "allows [linux/s390x]",
		},
		"no labels": {
			edit: func(csv *operatorsv1alpha1.ClusterServiceVersion) {
				for k := range csv.Labels {
					if strings.HasPrefix(k, "operatorframework.io/") {
						delete(csv.Labels, k)
					}
				}
			},
			platforms: registry(amd64, arm64), warning: "misses the label operatorframework.io/arch.arm64",
		},
		"an image that cannot be inspected": {
			platforms: func(image string) ([]v1.Platform, error) { return nil, errors.New("manifest unknown") },
			warning:   "unable to inspect",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := bundletest.Copy(t)
			if c.edit != nil {
				bundletest.EditCSV(t, dir, c.edit)
			}
			r, err := validate.MultiArch(dir, c.platforms)
			if err != nil {
				t.Fatal(err)
			}
			if c.errors && len(r.Errors) == 0 {
				t.Errorf("no error:\n%s", report(r))
			}
			if c.warning != "" && !strings.Contains(fmt.Sprint(r.Warnings), c.warning) {
				t.Errorf("no warning about %q:\n%s", c.warning, report(r))
			}
		})
	}
}
