// Command release cuts a release of the tree (`make release`, package release), or with
// --dry-run rehearses it in a copy of the tree against a registry on loopback:
//
//	release --version X.Y.Z [--next X.Y.Z] --image-registry REG [--plain-http] [--dry-run [--keep DIR]]
//
// It is a command of its own rather than part of cmd/olm: a release checks its frozen
// bundle with hack/olm/validate, which finds operator-sdk, a tool the image targets do
// not build.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/release"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

func main() {
	// operator-registry reports optional files it did not find at info level.
	logrus.SetLevel(logrus.WarnLevel)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "release:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	root, err := tools.RepoRoot()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	opts := release.Options{Log: os.Stdout}
	fs.StringVar(&opts.Version, "version", "", "The version released: the head's (VERSION).")
	fs.StringVar(&opts.Next, "next", "", "The head's version afterwards (NEXT_VERSION); empty means the next patch version.")
	fs.StringVar(&opts.Registry, "image-registry", "", "Where the images go (IMAGE_REGISTRY).")
	fs.BoolVar(&opts.PlainHTTP, "plain-http", false, "Talk plain HTTP to the registry.")
	dryRun := fs.Bool("dry-run", false, "Make the release in a copy of the tree, its images in a registry on loopback: nothing is pushed or changed.")
	keep := fs.String("keep", "", "With --dry-run: make the copy in this directory, which must not exist, and keep it.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if opts.Version == "" || (opts.Registry == "" && !*dryRun) {
		return errors.New("release: --version and --image-registry are required")
	}
	rev, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return fmt.Errorf("release: the commit released: %w", err)
	}
	opts.Revision = strings.TrimSpace(string(rev))
	opts.Root = root
	// Checked on the tree itself, before anything is built or copied.
	if _, err := release.CheckPlan(opts); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if !*dryRun {
		if status, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain").Output(); err != nil || len(status) > 0 {
			return fmt.Errorf("release: commit everything first; the work tree has changes:\n%s", status)
		}
		res, err := release.Run(ctx, opts)
		if err != nil {
			return err
		}
		printRelease(res)
		fmt.Printf("release: commit the changes, tag the release commit v%s, and push the catalog image (make catalog-build catalog-push)\n", res.Version)
		return nil
	}

	copyRoot := *keep
	if copyRoot == "" {
		dir, err := os.MkdirTemp("", "release-dry-run-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		copyRoot = dir + "/tree"
	} else if _, err := os.Stat(copyRoot); err == nil {
		return fmt.Errorf("release: --keep %s exists already", copyRoot)
	}
	if err := bundle.CopyRepository(ctx, root, copyRoot); err != nil {
		return err
	}
	reg, err := imagebuild.StartRegistry("127.0.0.1:0", imagebuild.RegistryOptions{})
	if err != nil {
		return err
	}
	defer func() { _ = reg.Close() }()
	opts.Root, opts.Registry, opts.PlainHTTP = copyRoot, reg.Ref("phalanks"), true
	fmt.Printf("release: dry run in %s, images in the registry %s\n", copyRoot, reg.Host)
	res, err := release.Run(ctx, opts)
	if err != nil {
		return fmt.Errorf("release (dry run): %w", err)
	}
	printRelease(res)
	cfg, err := catalog.Load(ctx, catalog.PackageDir(copyRoot))
	if err != nil {
		return err
	}
	for _, ch := range cfg.Channels {
		for _, e := range ch.Entries {
			fmt.Printf("release: channel %s: %s replaces %q, skipRange %q\n", ch.Name, e.Name, e.Replaces, e.SkipRange)
		}
	}
	changed, err := exec.CommandContext(ctx, "git", "-C", copyRoot, "status", "--short").Output()
	if err != nil {
		return err
	}
	fmt.Printf("release: a release would change:\n%s", changed)
	fmt.Println("release: dry run: nothing was pushed and the tree is unchanged")
	return nil
}

func printRelease(res *release.Result) {
	fmt.Printf("release: %s frozen in %s (previous release %q)\n", res.Version, res.Dir, res.Previous)
	fmt.Printf("release: operator image %s\nrelease: scorecard-test image %s\nrelease: bundle image %s\n", res.Image, res.ScorecardImage, res.BundleImage)
	fmt.Printf("release: the head is now %s\n", res.Next)
}
