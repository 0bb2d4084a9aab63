package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
)

// imageNames are the images `olm images` knows, in build order.
var imageNames = []string{"operator", "scorecard-tests", "bundle", "catalog"}

// runImages builds the images without a container runtime into an OCI image layout or
// a registry, or pushes what an earlier build put into the layout:
//
//	olm images build [--only NAMES] [--layout DIR | --push] [refs and release values]
//	olm images push  [--only NAMES] --layout DIR [refs]
func runImages(ctx context.Context, root string, args []string) error {
	if len(args) == 0 || (args[0] != "build" && args[0] != "push") {
		return errors.New("usage: olm images build|push [flags]")
	}
	verb := args[0]
	fs := flag.NewFlagSet("images "+verb, flag.ContinueOnError)
	only := fs.String("only", strings.Join(imageNames, ","), "Comma-separated images: "+strings.Join(imageNames, ", ")+".")
	layout := fs.String("layout", "", "OCI image layout directory the images are written to (build) or read from (push).")
	push := fs.Bool("push", false, "build: push each image to its reference instead of writing the layout.")
	plainHTTP := fs.Bool("plain-http", false, "Talk plain HTTP to the registries (loopback and private addresses always are).")
	refs := map[string]*string{
		"operator":        fs.String("image", "", "Operator image reference (IMG)."),
		"scorecard-tests": fs.String("scorecard-image", "", "Scorecard test image reference (SCORECARD_TEST_IMG)."),
		"bundle":          fs.String("bundle-image", "", "Bundle image reference (BUNDLE_IMG)."),
		"catalog":         fs.String("catalog-image", "", "Catalog image reference (CATALOG_IMG)."),
	}
	var p images.Params
	fs.StringVar(&p.Version, "version", "", "Operator version (org.opencontainers.image.version).")
	fs.StringVar(&p.Revision, "revision", "", "Commit built (org.opencontainers.image.revision).")
	bundleDir := fs.String("bundle-dir", bundle.Dir, "Bundle directory of the bundle image, relative to the repository root.")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	p.Root = root
	names := strings.Split(*only, ",")
	for _, n := range names {
		if !slices.Contains(imageNames, n) {
			return fmt.Errorf("unknown image %q (want %s)", n, strings.Join(imageNames, ", "))
		}
		if *refs[n] == "" {
			return fmt.Errorf("the %s image needs a reference", n)
		}
	}
	if verb == "build" && *layout == "" && !*push {
		return errors.New("images build: give --layout DIR or --push")
	}
	if verb == "push" && *layout == "" {
		return errors.New("images push: give the --layout DIR the images were built into")
	}
	opts := imagebuild.Options{Insecure: *plainHTTP}

	if verb == "push" {
		for _, n := range names {
			a, err := imagebuild.ReadLayout(*layout, *refs[n])
			if err != nil {
				return fmt.Errorf("%w: build it first", err)
			}
			byDigest, err := imagebuild.Push(ctx, *refs[n], a, opts)
			if err != nil {
				return err
			}
			fmt.Printf("olm: pushed the %s image %s (%s)\n", n, *refs[n], byDigest)
		}
		return nil
	}

	work, err := os.MkdirTemp("", "olm-images-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	b := &images.Builder{Root: root, WorkDir: work, Log: os.Stdout}
	for _, n := range names {
		spec, err := specFor(n, p, *bundleDir)
		if err != nil {
			return err
		}
		a, err := b.Build(ctx, spec)
		if err != nil {
			return err
		}
		d, err := a.Digest()
		if err != nil {
			return err
		}
		if *push {
			byDigest, err := imagebuild.Push(ctx, *refs[n], a, opts)
			if err != nil {
				return err
			}
			fmt.Printf("olm: pushed the %s image %s (%s)\n", n, *refs[n], byDigest)
			continue
		}
		if err := imagebuild.WriteLayout(*layout, *refs[n], a); err != nil {
			return err
		}
		fmt.Printf("olm: built the %s image %s (%s) into %s\n", n, *refs[n], d, *layout)
	}
	return nil
}

func specFor(name string, p images.Params, bundleDir string) (images.Spec, error) {
	switch name {
	case "operator":
		return images.Operator(p), nil
	case "scorecard-tests":
		return images.ScorecardTests(p), nil
	case "bundle":
		return images.Bundle(p, bundleDir)
	case "catalog":
		return images.Catalog(), nil
	}
	return images.Spec{}, fmt.Errorf("unknown image %q", name)
}
