// Package release cuts a release of the tree (`make release VERSION=x.y.z`): it pushes
// the release's operator and scorecard-test images, freezes its bundle with the images
// pinned by digest under hack/olm/releases/<version>, pushes that bundle's image and
// makes it the catalog's entry for the version, dates the CHANGELOG.md section of the
// release, and moves the head being developed on to the next version (the Makefile's
// VERSION, bundle/ and the catalog's new head, which replaces the release and skips every
// older one). A dry run does all of it in a copy of the tree against a registry on
// loopback, and changes and pushes nothing.
//
// Every step is the tool a maintainer would run by hand (operator-sdk through `make
// bundle`, the catalog code of `make catalog`, the daemonless image builds); this package
// only orders them and checks what a release must not get wrong.
package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/blang/semver/v4"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
)

// Changelog is the changelog's path, relative to the repository root.
const Changelog = "CHANGELOG.md"

// Options say what to release and where its images go.
type Options struct {
	// Root is the repository root the release is made in (a copy of it for a dry run).
	Root string
	// Version is the version released: it must be the head's (the Makefile's VERSION).
	Version string
	// Next is the head's version afterwards; empty means the next patch version.
	Next string
	// Registry is IMAGE_REGISTRY: the images are <Registry>/phalanks-operator:v<Version>,
	// …-scorecard-tests and …-bundle. PlainHTTP talks HTTP to it.
	Registry  string
	PlainHTTP bool
	// Revision is the commit released (org.opencontainers.image.revision).
	Revision string
	// Date is the release's date in CHANGELOG.md; zero means today.
	Date time.Time
	// Log receives a line per step and the tools' output.
	Log io.Writer
}

// Result is what a release produced.
type Result struct {
	Version, Previous, Next string
	// Dir is the frozen bundle directory, relative to the root.
	Dir string
	// Image, ScorecardImage and BundleImage are the pushed images, by digest.
	Image, ScorecardImage, BundleImage string
}

// Plan is a release's checked inputs.
type Plan struct {
	Version, Next semver.Version
	// Previous is the newest frozen release before Version.
	Previous string
}

// CheckPlan checks that opts describe a release the tree can make: Version is the head's
// and newer than every frozen release, not frozen yet, Next is newer than Version, and
// CHANGELOG.md says what the release changes.
func CheckPlan(opts Options) (*Plan, error) {
	v, err := semver.Parse(opts.Version)
	if err != nil {
		return nil, fmt.Errorf("VERSION %q: %w", opts.Version, err)
	}
	head, err := HeadVersion(opts.Root)
	if err != nil {
		return nil, err
	}
	if !v.Equals(head) {
		return nil, fmt.Errorf("VERSION %s is not the head being developed (the Makefile's VERSION ?= %s): "+
			"a release freezes the head", v, head)
	}
	frozen, err := FrozenReleases(opts.Root)
	if err != nil {
		return nil, err
	}
	p := &Plan{Version: v}
	for _, f := range frozen {
		if !f.LT(v) {
			return nil, fmt.Errorf("%s is not newer than the release %s in %s", v, f, catalog.ReleasesDir)
		}
		p.Previous = f.String()
	}
	p.Next = v
	p.Next.Patch++
	if opts.Next != "" {
		if p.Next, err = semver.Parse(opts.Next); err != nil {
			return nil, fmt.Errorf("NEXT_VERSION %q: %w", opts.Next, err)
		}
		if !p.Next.GT(v) {
			return nil, fmt.Errorf("NEXT_VERSION %s is not newer than %s", p.Next, v)
		}
	}
	text, err := os.ReadFile(filepath.Join(opts.Root, Changelog))
	if err != nil {
		return nil, err
	}
	if _, err := DateChangelog(string(text), v.String(), p.Previous, time.Now()); err != nil {
		return nil, err
	}
	return p, nil
}

// Run makes the release in opts.Root.
func Run(ctx context.Context, opts Options) (*Result, error) {
	plan, err := CheckPlan(opts)
	if err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { _, _ = fmt.Fprintf(opts.Log, "release: "+format+"\n", args...) }
	version := plan.Version.String()
	res := &Result{Version: version, Previous: plan.Previous, Next: plan.Next.String(), Dir: catalog.ReleaseDir(version)}
	ref := func(repo string) string { return fmt.Sprintf("%s/%s:v%s", opts.Registry, repo, version) }
	work, err := os.MkdirTemp("", "release-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	push := imagebuild.Options{Insecure: opts.PlainHTTP}
	builder := &images.Builder{Root: opts.Root, WorkDir: filepath.Join(work, "build"), Log: opts.Log}
	params := images.Params{Root: opts.Root, Version: version, Revision: opts.Revision}

	// 1. The images the bundle names, so that operator-sdk can pin them by digest.
	logf("building and pushing the operator and scorecard-test images of %s", version)
	if res.Image, err = buildAndPush(ctx, builder, images.Operator(params), ref("phalanks-operator"), push); err != nil {
		return nil, err
	}
	if res.ScorecardImage, err = buildAndPush(ctx, builder, images.ScorecardTests(params), ref("phalanks-operator-scorecard-tests"), push); err != nil {
		return nil, err
	}

	// 2. The bundle, pinned by digest, frozen.
	logf("make bundle VERSION=%s USE_IMAGE_DIGESTS=true, frozen as %s", version, res.Dir)
	generated, err := bundle.Generate(ctx, opts.Root, filepath.Join(work, "bundle"), bundle.Params{
		Version: version, Image: ref("phalanks-operator"), ScorecardImage: ref("phalanks-operator-scorecard-tests"), UseImageDigests: true,
	}, opts.Log)
	if err != nil {
		return nil, err
	}
	frozen := filepath.Join(opts.Root, res.Dir)
	if err := copyDir(generated, frozen); err != nil {
		return nil, err
	}
	pinned, err := validate.Pinned(frozen)
	if err != nil {
		return nil, err
	}
	if !pinned.OK() {
		return nil, fmt.Errorf("%s names images by tag: %v", res.Dir, pinned.Errors)
	}

	// 3. Its bundle image, and the catalog's entry for it.
	logf("building and pushing the bundle image of %s", res.Dir)
	spec, err := images.Bundle(params, res.Dir)
	if err != nil {
		return nil, err
	}
	if res.BundleImage, err = buildAndPush(ctx, builder, spec, ref("phalanks-operator-bundle"), push); err != nil {
		return nil, err
	}
	logf("the catalog's %s entry: the bundle image of %s", version, res.Dir)
	if _, _, err := catalog.Update(ctx, opts.Root, ref("phalanks-operator-bundle"), ref("phalanks-operator-bundle"), opts.PlainHTTP, opts.Log); err != nil {
		return nil, err
	}

	// 4. The changelog's section of the release.
	date := opts.Date
	if date.IsZero() {
		date = time.Now()
	}
	if err := editFile(filepath.Join(opts.Root, Changelog), func(s string) (string, error) {
		return DateChangelog(s, version, plan.Previous, date)
	}); err != nil {
		return nil, err
	}

	// 5. The head moves on: VERSION, bundle/ and the catalog's new head.
	logf("moving the head to %s: make bundle catalog VERSION=%s", res.Next, res.Next)
	if err := editFile(filepath.Join(opts.Root, "Makefile"), func(s string) (string, error) { return SetHeadVersion(s, res.Next) }); err != nil {
		return nil, err
	}
	// VERSION on the command line: make passes its own command line's VERSION (make
	// release VERSION=x.y.z) to the recipe's environment, which a ?= in the Makefile does
	// not override.
	cmd := bundle.Make(ctx, "-C", opts.Root, "--no-print-directory", "bundle", "catalog", "VERSION="+res.Next)
	cmd.Stdout, cmd.Stderr = opts.Log, opts.Log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("make bundle catalog for the head %s: %w", res.Next, err)
	}
	return res, nil
}

func buildAndPush(ctx context.Context, b *images.Builder, spec images.Spec, ref string, o imagebuild.Options) (string, error) {
	a, err := b.Build(ctx, spec)
	if err != nil {
		return "", err
	}
	return imagebuild.Push(ctx, ref, a, o)
}

// headVersionLine is the Makefile's line that sets the head's version.
var headVersionLine = regexp.MustCompile(`(?m)^VERSION \?= (\S+)$`)

// HeadVersion returns the version being developed: the Makefile's VERSION.
func HeadVersion(root string) (semver.Version, error) {
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return semver.Version{}, err
	}
	m := headVersionLine.FindSubmatch(makefile)
	if m == nil {
		return semver.Version{}, errors.New("the Makefile has no line VERSION ?= x.y.z")
	}
	return semver.Parse(string(m[1]))
}

// SetHeadVersion returns the Makefile with VERSION ?= next.
func SetHeadVersion(makefile, next string) (string, error) {
	if !headVersionLine.MatchString(makefile) {
		return "", errors.New("the Makefile has no line VERSION ?= x.y.z")
	}
	return headVersionLine.ReplaceAllString(makefile, "VERSION ?= "+next), nil
}

// FrozenReleases returns the versions under hack/olm/releases, oldest first.
func FrozenReleases(root string) ([]semver.Version, error) {
	entries, err := os.ReadDir(filepath.Join(root, catalog.ReleasesDir))
	if err != nil {
		return nil, err
	}
	var out []semver.Version
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		v, err := semver.Parse(e.Name())
		if err != nil {
			return nil, fmt.Errorf("%s/%s is not a version: %w", catalog.ReleasesDir, e.Name(), err)
		}
		out = append(out, v)
	}
	semver.Sort(out)
	return out, nil
}

const unreleased = "## [Unreleased]"

// repository is where CHANGELOG.md's version links point.
const repository = "https://github.com/phalanks/phalanks-operator"

// DateChangelog turns the [Unreleased] section of a Keep a Changelog file into version's,
// dated, under a new empty [Unreleased], and updates the links at the end. It refuses a
// changelog whose [Unreleased] section is empty or that already has a section for
// version.
func DateChangelog(text, version, previous string, date time.Time) (string, error) {
	start := strings.Index(text, unreleased+"\n")
	if start < 0 {
		return "", fmt.Errorf("%s has no %q section", Changelog, unreleased)
	}
	if strings.Contains(text, "## ["+version+"]") {
		return "", fmt.Errorf("%s already has a section for %s", Changelog, version)
	}
	body := text[start+len(unreleased)+1:]
	if end := strings.Index(body, "\n## ["); end >= 0 {
		body = body[:end]
	}
	if strings.TrimSpace(body) == "" {
		return "", fmt.Errorf("the %s section of %s is empty: say what %s changes", unreleased, Changelog, version)
	}
	dated := fmt.Sprintf("%s\n\n## [%s] - %s\n", unreleased, version, date.UTC().Format(time.DateOnly))
	text = text[:start] + dated + text[start+len(unreleased)+1:]

	links := regexp.MustCompile(`(?m)^\[Unreleased\]: .*$`)
	if !links.MatchString(text) {
		return "", fmt.Errorf("%s has no [Unreleased] link", Changelog)
	}
	link := fmt.Sprintf("[Unreleased]: %s/compare/v%s...HEAD\n[%s]: %s/releases/tag/v%s", repository, version, version, repository, version)
	if previous != "" {
		link = fmt.Sprintf("[Unreleased]: %s/compare/v%s...HEAD\n[%s]: %s/compare/v%s...v%s", repository, version, version, repository, previous, version)
	}
	return links.ReplaceAllLiteralString(text, link), nil
}

func editFile(path string, edit func(string) (string, error)) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := edit(string(data))
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(out), info.Mode().Perm())
}

// copyDir copies a generated bundle directory into dst, which must not exist yet.
func copyDir(src, dst string) error {
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("%s exists already", dst)
	}
	return os.CopyFS(dst, os.DirFS(src))
}
