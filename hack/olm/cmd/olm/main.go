// Command olm does the parts of this project's OLM packaging operator-sdk does not: the
// file-based catalog (catalog/, rendered with operator-registry's libraries, as opm
// does) and the images (operator, scorecard tests, bundle, catalog) without a container
// runtime. The bundle is operator-sdk's (`make bundle`).
//
//	olm catalog --bundle-image IMG [--from REF]
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

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"
	"github.com/sirupsen/logrus"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
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
		return errors.New("usage: olm catalog|images [flags]")
	}
	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	switch args[0] {
	case "catalog":
		return runCatalog(ctx, root, args[1:])
	case "images":
		return runImages(ctx, root, args[1:])
	default:
		return fmt.Errorf("unknown command %q (want catalog or images)", args[0])
	}
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
