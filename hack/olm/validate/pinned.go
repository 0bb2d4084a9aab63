package validate

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
)

// Pinned checks that the CSV of the bundle directory dir names every image by digest, as
// `make bundle USE_IMAGE_DIGESTS=true` (operator-sdk generate bundle --use-image-digests)
// must leave it: each container and init container of every Deployment, each entry of
// relatedImages and the containerImage annotation. Each image named otherwise (by tag, or
// not a valid reference) is an error. No operator-sdk validator checks this: a release
// bundle by tag passes all of them, and installs whatever the tag names on the day.
//
// The scorecard configuration (tests/scorecard/config.yaml) is not the CSV: operator-sdk
// leaves its images by tag, and OLM never runs them.
func Pinned(dir string) (Report, error) {
	var r Report
	b, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		return r, fmt.Errorf("load bundle %s: %w", dir, err)
	}
	csv := b.CSV
	check := func(where, image string) {
		if _, err := name.NewDigest(image); err != nil {
			r.Errors = append(r.Errors, fmt.Sprintf("pinned: %s names the image %q, not by digest (%v); USE_IMAGE_DIGESTS=true pins every image of the CSV", where, image, err))
		}
	}
	for _, d := range csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs {
		spec := d.Spec.Template.Spec
		for _, c := range spec.InitContainers {
			check(fmt.Sprintf("the CSV's Deployment %s, init container %s,", d.Name, c.Name), c.Image)
		}
		for _, c := range spec.Containers {
			check(fmt.Sprintf("the CSV's Deployment %s, container %s,", d.Name, c.Name), c.Image)
		}
	}
	for _, ri := range csv.Spec.RelatedImages {
		check(fmt.Sprintf("the CSV's relatedImages entry %q", ri.Name), ri.Image)
	}
	if image, ok := csv.Annotations["containerImage"]; ok {
		check("the CSV's containerImage annotation", image)
	}
	return r, nil
}
