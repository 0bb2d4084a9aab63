package validate_test

import (
	"strings"
	"testing"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"

	"github.com/phalanks/phalanks-operator/hack/olm/internal/bundletest"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
)

// pinAll names every image of the CSV by a digest, as make bundle USE_IMAGE_DIGESTS=true
// leaves it (images.TestImagesBuildPushAndPullBack runs the real thing against a registry).
func pinAll(c *operatorsv1alpha1.ClusterServiceVersion) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pin := func(image string) string {
		repo, _, _ := strings.Cut(image, "@")
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		return repo + digest
	}
	for i := range c.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		spec := &c.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[i].Spec.Template.Spec
		for j := range spec.Containers {
			spec.Containers[j].Image = pin(spec.Containers[j].Image)
		}
	}
	for i := range c.Spec.RelatedImages {
		c.Spec.RelatedImages[i].Image = pin(c.Spec.RelatedImages[i].Image)
	}
	c.Annotations["containerImage"] = pin(c.Annotations["containerImage"])
}

// TestPinnedRejectsAnImageByTag: a bundle that names every image of its CSV by digest
// passes validate.Pinned, and one image by tag in any place the CSV names images fails
// it, with a finding that names the place and the image.
func TestPinnedRejectsAnImageByTag(t *testing.T) {
	const tagged = "quay.io/phalanks/phalanks-operator:v9.9.9"
	pinned := bundletest.Copy(t)
	bundletest.EditCSV(t, pinned, pinAll)
	r, err := validate.Pinned(pinned)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("a CSV with every image by digest:\n%s", report(r))
	}

	for _, tc := range []struct {
		name  string
		unpin func(c *operatorsv1alpha1.ClusterServiceVersion)
		where string
	}{
		{"the manager container", func(c *operatorsv1alpha1.ClusterServiceVersion) {
			c.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Image = tagged
		}, "container manager"},
		{"an init container", func(c *operatorsv1alpha1.ClusterServiceVersion) {
			spec := &c.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec
			spec.InitContainers = append(spec.InitContainers, spec.Containers[0])
			spec.InitContainers[0].Name, spec.InitContainers[0].Image = "setup", tagged
		}, "init container setup"},
		{"a related image", func(c *operatorsv1alpha1.ClusterServiceVersion) {
			c.Spec.RelatedImages = append(c.Spec.RelatedImages, operatorsv1alpha1.RelatedImage{Name: "helper", Image: tagged})
		}, `relatedImages entry "helper"`},
		{"the containerImage annotation", func(c *operatorsv1alpha1.ClusterServiceVersion) {
			c.Annotations["containerImage"] = tagged
		}, "containerImage annotation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := bundletest.Copy(t)
			bundletest.EditCSV(t, dir, func(c *operatorsv1alpha1.ClusterServiceVersion) { pinAll(c); tc.unpin(c) })
			r, err := validate.Pinned(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], tc.where) || !strings.Contains(r.Errors[0], tagged) {
				t.Errorf("want one error naming %s and %s:\n%s", tc.where, tagged, report(r))
			}
		})
	}

	// The committed bundle/ is make bundle's without USE_IMAGE_DIGESTS: every image by tag.
	r, err = validate.Pinned(bundletest.Dir(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Errors) == 0 {
		t.Error("the committed bundle, by tag, passes validate.Pinned")
	}
	t.Logf("the committed bundle by tag:\n%s", report(r))
}
