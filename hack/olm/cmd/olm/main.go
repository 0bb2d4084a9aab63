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
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
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
	b, headDir, err := catalog.Update(ctx, root, *image, *from, *plainHTTP, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("olm: %s (%s, from %s) is the head of channel %s in %s\n", b.Name, b.Image, headDir, bundle.Channel, catalog.PackageDir(root))
	return nil
}
