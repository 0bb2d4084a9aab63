package catalog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/operator-framework/operator-registry/alpha/action"
	"github.com/operator-framework/operator-registry/alpha/action/migrations"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/operator-framework/operator-registry/alpha/property"
	"github.com/operator-framework/operator-registry/pkg/image/containersimageregistry"
	"go.podman.io/image/v5/types"

	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/hack/olm/internal/offline"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
)

// ReleasesDir holds the bundle directory of every release the catalog lists below its
// head, as released (ReleasesDir/<version>/manifests, metadata, …), relative to the
// repository root: the bundle image a catalog entry references is built from it.
const ReleasesDir = "hack/olm/releases"

// ReleaseDir returns the released bundle directory of version, relative to the root.
func ReleaseDir(version string) string { return filepath.Join(ReleasesDir, version) }

// referenceOnly is the migration OperatorHub's catalogs are rendered with
// (`opm render --migrate-level=bundle-object-to-csv-metadata`): an olm.bundle keeps the
// CSV's metadata as olm.csv.metadata and references its bundle image for the manifests,
// instead of embedding each as olm.bundle.object.
const referenceOnly = "bundle-object-to-csv-metadata"

// RenderBundleImage renders the bundle image ref as `opm render REF
// --migrate-level=bundle-object-to-csv-metadata` does: it pulls the image with
// operator-registry's own client (containers/image) and returns an olm.bundle that
// references the image. plainHTTP lets it talk HTTP to a registry without TLS (a
// loopback one).
func RenderBundleImage(ctx context.Context, ref string, plainHTTP bool) (*declcfg.Bundle, error) {
	work, err := os.MkdirTemp("", "render-bundle-image-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	sys, err := systemContext(work, plainHTTP)
	if err != nil {
		return nil, err
	}
	reg, err := containersimageregistry.New(sys, containersimageregistry.WithTemporaryImageCache())
	if err != nil {
		return nil, err
	}
	defer func() { _ = reg.Destroy() }()
	m, err := migrations.NewMigrations(referenceOnly)
	if err != nil {
		return nil, err
	}
	cfg, err := action.Render{
		Refs:           []string{ref},
		AllowedRefMask: action.RefBundleImage,
		Registry:       reg,
		Migrations:     m,
	}.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", ref, err)
	}
	if len(cfg.Bundles) != 1 {
		return nil, fmt.Errorf("render %s: got %d bundles, want 1", ref, len(cfg.Bundles))
	}
	return &cfg.Bundles[0], nil
}

// RenderBundleDirAsImage renders a bundle directory the way RenderBundleImage renders
// the image built from it and named image: what the catalog entry of that image must be.
func RenderBundleDirAsImage(ctx context.Context, dir, image string) (*declcfg.Bundle, error) {
	tmpl, err := template.New("image").Parse(image)
	if err != nil {
		return nil, fmt.Errorf("bundle image %q: %w", image, err)
	}
	m, err := migrations.NewMigrations(referenceOnly)
	if err != nil {
		return nil, err
	}
	cfg, err := action.Render{
		Refs:             []string{dir},
		AllowedRefMask:   action.RefBundleDir,
		Registry:         offline.Registry{},
		ImageRefTemplate: tmpl,
		Migrations:       m,
	}.Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", dir, err)
	}
	if len(cfg.Bundles) != 1 {
		return nil, fmt.Errorf("render %s: got %d bundles, want 1", dir, len(cfg.Bundles))
	}
	return &cfg.Bundles[0], nil
}

// systemContext keeps containers/image away from the machine's configuration: no
// registries.conf mirrors, and a signature policy that accepts the unsigned images this
// project builds.
func systemContext(dir string, plainHTTP bool) (*types.SystemContext, error) {
	policy := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o600); err != nil {
		return nil, err
	}
	registries := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(registries, nil, 0o600); err != nil {
		return nil, err
	}
	sys := &types.SystemContext{
		OSChoice:                    "linux",
		SignaturePolicyPath:         policy,
		SystemRegistriesConfPath:    registries,
		SystemRegistriesConfDirPath: filepath.Join(dir, "registries.d"),
		BlobInfoCacheDir:            filepath.Join(dir, "blob-info-cache"),
	}
	if plainHTTP {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
	}
	return sys, nil
}

// BundleFromImage builds the bundle image of the bundle directory dir (relative to
// root) without a container runtime, and renders it from a registry into the olm.bundle
// that names it publicRef's repository by digest. With from set, the image is rendered
// from that registry reference (where make bundle-push put it; plainHTTP for a registry
// without TLS), which must hold exactly the image built here; otherwise it is served
// from a registry on loopback for the render. Either way the catalog entry is what
// `opm render <repository>@<digest>` gives.
func BundleFromImage(ctx context.Context, b *images.Builder, root, dir, publicRef, from string, plainHTTP bool) (*declcfg.Bundle, error) {
	spec, err := images.Bundle(images.Params{Root: root}, dir)
	if err != nil {
		return nil, err
	}
	art, err := b.Build(ctx, spec)
	if err != nil {
		return nil, err
	}
	digest, err := art.Digest()
	if err != nil {
		return nil, err
	}
	public, err := name.ParseReference(publicRef)
	if err != nil {
		return nil, fmt.Errorf("bundle image %q: %w", publicRef, err)
	}
	byDigest := public.Context().Digest(digest.String()).String()

	var renderRef string
	if from != "" {
		got, err := imagebuild.Resolve(ctx, from, imagebuild.Options{Insecure: plainHTTP})
		if err != nil {
			return nil, err
		}
		if got != digest {
			return nil, fmt.Errorf("%s is %s, but %s builds %s: push it first (make bundle-push)", from, got, dir, digest)
		}
		src, err := name.ParseReference(from, name.Insecure)
		if err != nil {
			return nil, err
		}
		renderRef = src.Context().Digest(digest.String()).String()
	} else {
		reg, err := imagebuild.StartRegistry("127.0.0.1:0", imagebuild.RegistryOptions{})
		if err != nil {
			return nil, err
		}
		defer func() { _ = reg.Close() }()
		if renderRef, err = imagebuild.Push(ctx, reg.Ref(public.Context().RepositoryStr()+":render"), art, imagebuild.Options{}); err != nil {
			return nil, err
		}
		plainHTTP = true
	}
	rendered, err := RenderBundleImage(ctx, renderRef, plainHTTP)
	if err != nil {
		return nil, err
	}
	rendered.Image = strings.Replace(rendered.Image, renderRef, byDigest, 1)
	for i := range rendered.RelatedImages {
		if rendered.RelatedImages[i].Image == renderRef {
			rendered.RelatedImages[i].Image = byDigest
		}
	}
	// opm sorts related images by reference; keep that order under the public name.
	sort.Slice(rendered.RelatedImages, func(i, j int) bool {
		return rendered.RelatedImages[i].Image < rendered.RelatedImages[j].Image
	})
	return rendered, nil
}

// ReferenceReleases replaces every release below the head that still embeds its
// manifests (olm.bundle.object) with the rendering of its bundle image: render gets the
// release's version and the entry's image reference, and returns the new entry.
func ReferenceReleases(cfg *declcfg.DeclarativeConfig, render func(version, image string) (*declcfg.Bundle, error)) error {
	head := Head(cfg)
	for i, b := range cfg.Bundles {
		if b.Name == head || !embedsObjects(&b) {
			continue
		}
		v, err := bundleVersion(&b)
		if err != nil {
			return err
		}
		rendered, err := render(v.String(), b.Image)
		if err != nil {
			return fmt.Errorf("release %s: %w", b.Name, err)
		}
		if rendered.Name != b.Name {
			return fmt.Errorf("release %s: its bundle image holds %s", b.Name, rendered.Name)
		}
		cfg.Bundles[i] = *rendered
	}
	return nil
}

// embedsObjects reports whether an olm.bundle carries its manifests as
// olm.bundle.object properties.
func embedsObjects(b *declcfg.Bundle) bool {
	for _, p := range b.Properties {
		if p.Type == property.TypeBundleObject {
			return true
		}
	}
	return false
}

// EmbedsObjects reports whether an olm.bundle carries its manifests as
// olm.bundle.object properties rather than referencing its image alone.
func EmbedsObjects(b *declcfg.Bundle) bool { return embedsObjects(b) }

// BundleVersion returns an olm.bundle's version (its olm.package property).
func BundleVersion(b *declcfg.Bundle) (string, error) {
	v, err := bundleVersion(b)
	return v.String(), err
}
