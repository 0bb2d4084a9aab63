// Command olm builds and checks this project's OLM packaging: the bundle (bundle/ and
// bundle.Dockerfile), the file-based catalog (catalog/), the offline scorecard checks, and
// the images (operator, scorecard tests, bundle, catalog) without a container runtime.
//
//	olm bundle --version 0.2.0 --image IMG --scorecard-image IMG [--use-image-digests]
//	olm catalog --bundle-image IMG [--from REF]
//	olm scorecard
//	olm images build|push [--only NAMES] [--layout DIR | --push] --image IMG …
//
// Paths are relative to the repository root, found from the working directory.
package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	scapiv1alpha3 "github.com/operator-framework/api/pkg/apis/scorecard/v1alpha3"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/sirupsen/logrus"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/hack/olm/scorecard"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func main() {
	// operator-registry reports optional files it did not find at info level.
	logrus.SetLevel(logrus.WarnLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "olm:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: olm bundle|catalog|scorecard|images [flags]")
	}
	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	switch args[0] {
	case "bundle":
		return runBundle(ctx, root, args[1:])
	case "catalog":
		return runCatalog(ctx, root, args[1:])
	case "scorecard":
		return runScorecard(root, args[1:])
	case "images":
		return runImages(ctx, root, args[1:])
	default:
		return fmt.Errorf("unknown command %q (want bundle, catalog, scorecard or images)", args[0])
	}
}

func runBundle(ctx context.Context, root string, args []string) error {
	fs := flag.NewFlagSet("bundle", flag.ContinueOnError)
	var p bundle.Params
	fs.StringVar(&p.Version, "version", "", "Operator version (semver, no leading v).")
	fs.StringVar(&p.Image, "image", "", "Manager image; empty keeps config/manager's.")
	fs.StringVar(&p.ScorecardImage, "scorecard-image", "", "Image of the custom scorecard tests.")
	digests := fs.Bool("use-image-digests", false, "Pin the manager image by the digest its registry holds for --image (operator-sdk's USE_IMAGE_DIGESTS).")
	plainHTTP := fs.Bool("plain-http", false, "Talk plain HTTP to the manager image's registry.")
	out := fs.String("output", root, "Directory to write bundle/ and bundle.Dockerfile into.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *digests {
		pinned, err := bundle.PinImage(ctx, p.Image, *plainHTTP)
		if err != nil {
			return err
		}
		p.Image = pinned
	}
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		return err
	}
	in, err := bundle.ReadInputs(ctx, root, kustomize)
	if err != nil {
		return err
	}
	b, err := bundle.Assemble(in, p)
	if err != nil {
		return err
	}
	for _, l := range b.LeftOut {
		fmt.Printf("olm: left to OLM: %s\n", l)
	}
	files, err := b.Files()
	if err != nil {
		return err
	}
	if err := bundle.Write(*out, files); err != nil {
		return err
	}
	fmt.Printf("olm: wrote %s/ and %s (%s, manager image %s)\n", bundle.Dir, bundle.Dockerfile, filepath.Join(*out, bundle.Dir), p.Image)
	return nil
}

func runCatalog(ctx context.Context, root string, args []string) error {
	fs := flag.NewFlagSet("catalog", flag.ContinueOnError)
	image := fs.String("bundle-image", "", "Reference of the bundle image (BUNDLE_IMG); the catalog names its repository by digest.")
	from := fs.String("from", "", "Render the bundle image from this registry reference (after make bundle-push) instead of a loopback registry.")
	plainHTTP := fs.Bool("plain-http", false, "Talk plain HTTP to the --from registry.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *image == "" {
		return errors.New("catalog: --bundle-image is required")
	}
	work, err := os.MkdirTemp("", "olm-catalog-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	builder := &images.Builder{Root: root, WorkDir: work}

	csv, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		return fmt.Errorf("load %s: %w", bundle.Dir, err)
	}
	// A released version's catalog entry is its released bundle (with the manager pinned
	// by digest), not the working bundle/ of the same version.
	headDir := bundle.Dir
	if released := catalog.ReleaseDir(csv.CSV.Spec.Version.String()); exists(filepath.Join(root, released)) {
		headDir = released
	}
	b, err := catalog.BundleFromImage(ctx, builder, root, headDir, *image, *from, *plainHTTP)
	if err != nil {
		return err
	}
	var icon *declcfg.Icon
	if len(csv.CSV.Spec.Icon) > 0 {
		data, err := base64.StdEncoding.DecodeString(csv.CSV.Spec.Icon[0].Data)
		if err != nil {
			return fmt.Errorf("CSV icon: %w", err)
		}
		icon = &declcfg.Icon{Data: data, MediaType: csv.CSV.Spec.Icon[0].MediaType}
	}
	pkgDir := catalog.PackageDir(root)
	cfg, err := catalog.Load(ctx, pkgDir)
	if err != nil {
		return err
	}
	if err := catalog.AddHead(cfg, b, icon, csv.CSV.GetAnnotations()["description"]); err != nil {
		return err
	}
	err = catalog.ReferenceReleases(cfg, func(version, ref string) (*declcfg.Bundle, error) {
		fmt.Printf("olm: rendering release %s from its bundle image (%s)\n", version, catalog.ReleaseDir(version))
		return catalog.BundleFromImage(ctx, builder, root, catalog.ReleaseDir(version), ref, "", false)
	})
	if err != nil {
		return err
	}
	if err := catalog.Write(pkgDir, cfg); err != nil {
		return err
	}
	if err := catalog.Validate(ctx, filepath.Join(root, catalog.Dir)); err != nil {
		return fmt.Errorf("the updated catalog does not validate: %w", err)
	}
	fmt.Printf("olm: %s (%s, from %s) is the head of channel %s in %s\n", b.Name, b.Image, headDir, bundle.Channel, pkgDir)
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// runScorecard runs the built-in scorecard tests on bundle/ and prints their results in
// the shape of the scorecard's text output; it fails when a test does not pass.
func runScorecard(root string, args []string) error {
	fs := flag.NewFlagSet("scorecard", flag.ContinueOnError)
	dir := fs.String("bundle", filepath.Join(root, bundle.Dir), "Bundle directory.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var failed []string
	for _, name := range scorecard.Builtin {
		r := scorecard.Run(name, *dir)
		fmt.Printf("%-26s %s\n", r.Name, r.State)
		for _, e := range r.Errors {
			fmt.Printf("    error: %s\n", e)
		}
		for _, s := range r.Suggestions {
			fmt.Printf("    suggestion: %s\n", s)
		}
		if r.State != scapiv1alpha3.PassState {
			failed = append(failed, name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("scorecard tests did not pass: %v", failed)
	}
	return nil
}
