package catalog

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
)

// Update makes the bundle of the tree at root the head of the channel (`make catalog`):
// it builds the bundle image of bundle/ (or, for a version already released, of its
// released directory), renders it from a registry (from, or a loopback one) under image's
// repository by digest, adds it with AddHead, renders older releases that still embed
// their manifests from their images, writes and validates the catalog. It returns the
// head's entry and the directory it was built from.
func Update(ctx context.Context, root, image, from string, plainHTTP bool, log io.Writer) (*declcfg.Bundle, string, error) {
	if image == "" {
		return nil, "", fmt.Errorf("catalog: the bundle image reference is required")
	}
	work, err := os.MkdirTemp("", "olm-catalog-")
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = os.RemoveAll(work) }()
	builder := &images.Builder{Root: root, WorkDir: work}

	csv, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		return nil, "", fmt.Errorf("load %s: %w", bundle.Dir, err)
	}
	// A released version's catalog entry is its released bundle (with the manager pinned
	// by digest), not the working bundle/ of the same version.
	headDir := bundle.Dir
	if released := ReleaseDir(csv.CSV.Spec.Version.String()); exists(filepath.Join(root, released)) {
		headDir = released
	}
	b, err := BundleFromImage(ctx, builder, root, headDir, image, from, plainHTTP)
	if err != nil {
		return nil, "", err
	}
	var icon *declcfg.Icon
	if len(csv.CSV.Spec.Icon) > 0 {
		data, err := base64.StdEncoding.DecodeString(csv.CSV.Spec.Icon[0].Data)
		if err != nil {
			return nil, "", fmt.Errorf("CSV icon: %w", err)
		}
		icon = &declcfg.Icon{Data: data, MediaType: csv.CSV.Spec.Icon[0].MediaType}
	}
	pkgDir := PackageDir(root)
	cfg, err := Load(ctx, pkgDir)
	if err != nil {
		return nil, "", err
	}
	if err := AddHead(cfg, b, icon, csv.CSV.GetAnnotations()["description"]); err != nil {
		return nil, "", err
	}
	err = ReferenceReleases(cfg, func(version, ref string) (*declcfg.Bundle, error) {
		_, _ = fmt.Fprintf(log, "olm: rendering release %s from its bundle image (%s)\n", version, ReleaseDir(version))
		return BundleFromImage(ctx, builder, root, ReleaseDir(version), ref, "", false)
	})
	if err != nil {
		return nil, "", err
	}
	if err := Write(pkgDir, cfg); err != nil {
		return nil, "", err
	}
	if err := Validate(ctx, filepath.Join(root, Dir)); err != nil {
		return nil, "", fmt.Errorf("the updated catalog does not validate: %w", err)
	}
	return b, headDir, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
