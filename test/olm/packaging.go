package olm

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"path/filepath"

	"github.com/blang/semver/v4"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/operator-registry/alpha/declcfg"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// imageRegistry is the Makefile's IMAGE_REGISTRY: the bundle names the images as a
// release does, and the node pulls them from its local registry, which mirrors it.
const imageRegistry = "quay.io/phalanks"

// Release is the tree packaged as one version.
type Release struct {
	Version string
	// BundleDir is the generated bundle directory (manifests/, metadata/, tests/), with
	// its bundle.Dockerfile in the parent directory.
	BundleDir string
	// CSV is the bundle's ClusterServiceVersion.
	CSV *operatorsv1alpha1.ClusterServiceVersion
	// Image and ScorecardImage are the operator and scorecard-test images the bundle
	// names; BundleImage is the bundle's own image.
	Image, ScorecardImage, BundleImage string
	// Bundle is the catalog entry of the bundle image, by digest (Images.PushRelease).
	Bundle *declcfg.Bundle
}

// CSVName is the release's ClusterServiceVersion name, phalanks-operator.v<version>.
func (r *Release) CSVName() string { return r.CSV.Name }

// ReleasedVersion returns the version of the committed bundle, the release the tree is
// packaged as.
func ReleasedVersion() (semver.Version, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return semver.Version{}, err
	}
	b, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		return semver.Version{}, fmt.Errorf("load the committed bundle: %w", err)
	}
	return b.CSV.Spec.Version.Version, nil
}

// PackageRelease packages the tree as version the way a release does: `make bundle
// VERSION=… IMG=… SCORECARD_TEST_IMG=…` (operator-sdk) in a copy of the tree under dir.
func PackageRelease(ctx context.Context, version semver.Version, dir string, log io.Writer) (*Release, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	r := &Release{
		Version:        version.String(),
		Image:          fmt.Sprintf("%s/phalanks-operator:v%s", imageRegistry, version),
		ScorecardImage: fmt.Sprintf("%s/phalanks-operator-scorecard-tests:v%s", imageRegistry, version),
		BundleImage:    fmt.Sprintf("%s/phalanks-operator-bundle:v%s", imageRegistry, version),
	}
	r.BundleDir, err = bundle.Generate(ctx, root, dir, bundle.Params{
		Version:        r.Version,
		Image:          r.Image,
		ScorecardImage: r.ScorecardImage,
	}, log)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", version, err)
	}
	b, err := apimanifests.GetBundleFromDir(r.BundleDir)
	if err != nil {
		return nil, fmt.Errorf("load the bundle of %s: %w", version, err)
	}
	r.CSV = b.CSV
	return r, nil
}

// WriteCatalog writes a file-based catalog root at dir whose stable channel holds the
// releases in order, each added as the new head the way `make catalog` does (replaces
// the previous head, skipRange over the older ones), each entry referencing its bundle
// image by digest as the published catalog does (Images.PushRelease rendered them). OLM
// installs from it with a bundle unpack Job per bundle. The catalog is validated as `opm
// validate` does. It returns the channel's entries.
func WriteCatalog(ctx context.Context, dir string, releases ...*Release) ([]declcfg.ChannelEntry, error) {
	cfg := &declcfg.DeclarativeConfig{}
	for _, r := range releases {
		if r.Bundle == nil {
			return nil, fmt.Errorf("release %s has no bundle image rendered: push its images first", r.Version)
		}
		var icon *declcfg.Icon
		if len(r.CSV.Spec.Icon) > 0 {
			data, err := base64.StdEncoding.DecodeString(r.CSV.Spec.Icon[0].Data)
			if err != nil {
				return nil, fmt.Errorf("icon of %s: %w", r.CSVName(), err)
			}
			icon = &declcfg.Icon{Data: data, MediaType: r.CSV.Spec.Icon[0].MediaType}
		}
		if err := catalog.AddHead(cfg, r.Bundle, icon, r.CSV.GetAnnotations()["description"]); err != nil {
			return nil, err
		}
	}
	if err := catalog.Write(filepath.Join(dir, bundle.PackageName), cfg); err != nil {
		return nil, err
	}
	if err := catalog.Validate(ctx, dir); err != nil {
		return nil, fmt.Errorf("catalog %s does not validate: %w", dir, err)
	}
	if len(cfg.Channels) != 1 {
		return nil, fmt.Errorf("catalog %s has %d channels, want 1", dir, len(cfg.Channels))
	}
	return cfg.Channels[0].Entries, nil
}
