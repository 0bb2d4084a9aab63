package release_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	apimanifests "github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/operator-registry/alpha/declcfg"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/catalog"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/hack/olm/release"
	"github.com/phalanks/phalanks-operator/hack/olm/validate"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

const changelog = `# Changelog

Intro.

## [Unreleased]

### Added

- Something.

## [0.1.0] - 2026-11-21

### Added

- The first.

[Unreleased]: https://github.com/phalanks/phalanks-operator/compare/v0.1.0...HEAD
[0.1.0]: https://github.com/phalanks/phalanks-operator/releases/tag/v0.1.0
`

func TestDateChangelog(t *testing.T) {
	date := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	got, err := release.DateChangelog(changelog, "0.2.0", "0.1.0", date)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(
		"## [Unreleased]\n\n### Added\n\n- Something.", "## [Unreleased]\n\n## [0.2.0] - 2026-12-01\n\n### Added\n\n- Something.",
		"[Unreleased]: https://github.com/phalanks/phalanks-operator/compare/v0.1.0...HEAD",
		"[Unreleased]: https://github.com/phalanks/phalanks-operator/compare/v0.2.0...HEAD\n"+
			"[0.2.0]: https://github.com/phalanks/phalanks-operator/compare/v0.1.0...v0.2.0",
	).Replace(changelog)
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for name, tc := range map[string]struct{ text, version string }{
		"an empty Unreleased section":   {strings.Replace(changelog, "### Added\n\n- Something.\n\n", "", 1), "0.2.0"},
		"no Unreleased section":         {strings.Replace(changelog, "## [Unreleased]", "## [Next]", 1), "0.2.0"},
		"a section of the version":      {changelog, "0.1.0"},
		"no link for Unreleased at all": {strings.Replace(changelog, "[Unreleased]: ", "Unreleased: ", 1), "0.2.0"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := release.DateChangelog(tc.text, tc.version, "0.1.0", date); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestSetHeadVersion(t *testing.T) {
	got, err := release.SetHeadVersion("# x\nVERSION ?= 0.2.0\nIMG ?= a:v$(VERSION)\n", "0.2.1")
	if err != nil || got != "# x\nVERSION ?= 0.2.1\nIMG ?= a:v$(VERSION)\n" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := release.SetHeadVersion("VERSION = 0.2.0\n", "0.2.1"); err == nil {
		t.Error("a Makefile without VERSION ?= was accepted")
	}
}

// TestThePlanRefusesWhatAReleaseMustNotDo checks the release's inputs against the tree:
// only the head is released, only forward, and the head moves forward.
func TestThePlanRefusesWhatAReleaseMustNotDo(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	head, err := release.HeadVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := release.FrozenReleases(root)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := release.CheckPlan(release.Options{Root: root, Version: head.String()})
	if err != nil {
		t.Fatalf("the head %s cannot be released: %v", head, err)
	}
	wantNext := head
	wantNext.Patch++
	if !plan.Next.Equals(wantNext) || plan.Previous != frozen[len(frozen)-1].String() {
		t.Errorf("plan %+v, want the next patch version %s after the newest frozen release %s", plan, wantNext, frozen[len(frozen)-1])
	}
	older := frozen[len(frozen)-1]
	for name, opts := range map[string]release.Options{
		"a version that is not the head":      {Version: "9.9.9"},
		"a frozen release":                    {Version: older.String()},
		"a next version that is not newer":    {Version: head.String(), Next: head.String()},
		"a next version that is not a semver": {Version: head.String(), Next: "next"},
	} {
		t.Run(name, func(t *testing.T) {
			opts.Root = root
			if _, err := release.CheckPlan(opts); err == nil {
				t.Error("accepted")
			}
		})
	}
}

// TestMakeReleaseDryRun runs `make release DRY_RUN=true` on the tree as a maintainer
// would before a release, keeping its copy: the tree and every pushed image stay as they
// were, and the copy holds the release as a real one would leave the tree.
func TestMakeReleaseDryRun(t *testing.T) {
	ctx := t.Context()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	head, err := release.HeadVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := release.FrozenReleases(root)
	if err != nil {
		t.Fatal(err)
	}
	oldest, previous := frozen[0], frozen[len(frozen)-1]
	next := head
	next.Patch++
	before := gitStatus(t, root)

	copyRoot := filepath.Join(t.TempDir(), "tree")
	cmd := bundle.Make(ctx, "-C", root, "--no-print-directory", "release", "VERSION="+head.String(), "DRY_RUN=true", "RELEASE_KEEP="+copyRoot)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("make release DRY_RUN=true: %v\n%s", err, out.String())
	}
	t.Logf("make release DRY_RUN=true:\n%s", tail(out.String(), 30))
	if after := gitStatus(t, root); after != before {
		t.Errorf("the dry run changed the tree:\nbefore\n%s\nafter\n%s", before, after)
	}

	// The frozen release: its bundle pinned by digest, the version's CSV.
	frozenDir := filepath.Join(copyRoot, catalog.ReleaseDir(head.String()))
	pinned, err := validate.Pinned(frozenDir)
	if err != nil {
		t.Fatal(err)
	}
	if !pinned.OK() {
		t.Errorf("the frozen bundle names images by tag: %v", pinned.Errors)
	}
	b, err := apimanifests.GetBundleFromDir(frozenDir)
	if err != nil {
		t.Fatal(err)
	}
	if !b.CSV.Spec.Version.Equals(head) {
		t.Errorf("the frozen CSV is version %s, want %s", b.CSV.Spec.Version, head)
	}

	// The catalog: the release is the image of its frozen directory, and the new head
	// replaces it and skips every older release.
	cfg, err := catalog.Load(ctx, catalog.PackageDir(copyRoot))
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]declcfg.ChannelEntry{}
	for _, e := range cfg.Channels[0].Entries {
		entries[e.Name] = e
	}
	name := func(v semver.Version) string { return bundle.PackageName + ".v" + v.String() }
	for v, want := range map[string]declcfg.ChannelEntry{
		head.String(): {Name: name(head), Replaces: name(previous), SkipRange: ">=" + oldest.String() + " <" + head.String()},
		next.String(): {Name: name(next), Replaces: name(head), SkipRange: ">=" + oldest.String() + " <" + next.String()},
	} {
		if got := entries[want.Name]; got.Replaces != want.Replaces || got.SkipRange != want.SkipRange {
			t.Errorf("the channel's %s entry is %+v, want %+v", v, got, want)
		}
	}
	if h := catalog.Head(cfg); h != name(next) {
		t.Errorf("the channel head is %s, want %s", h, name(next))
	}
	work := t.TempDir()
	spec, err := images.Bundle(images.Params{Root: copyRoot}, catalog.ReleaseDir(head.String()))
	if err != nil {
		t.Fatal(err)
	}
	art, err := (&images.Builder{Root: copyRoot, WorkDir: work}).Build(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := art.Digest()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range cfg.Bundles {
		if e.Name == name(head) && !strings.HasSuffix(e.Image, "@"+digest.String()) {
			t.Errorf("the catalog names %s's bundle %s, not the image of its frozen directory (%s)", head, e.Image, digest)
		}
	}

	// The head moved on, and the changelog dated the release.
	if h, err := release.HeadVersion(copyRoot); err != nil || !h.Equals(next) {
		t.Errorf("the head is %v (%v), want %s", h, err, next)
	}
	working, err := apimanifests.GetBundleFromDir(filepath.Join(copyRoot, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if !working.CSV.Spec.Version.Equals(next) {
		t.Errorf("bundle/ is version %s, want the new head %s", working.CSV.Spec.Version, next)
	}
	text, err := os.ReadFile(filepath.Join(copyRoot, release.Changelog))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "## [Unreleased]\n\n## ["+head.String()+"] - ") {
		t.Errorf("CHANGELOG.md does not open a new Unreleased section above the dated %s", head)
	}

	// Released once, the version cannot be released again.
	again := bundle.Make(ctx, "-C", copyRoot, "--no-print-directory", "release", "VERSION="+head.String(), "DRY_RUN=true")
	if msg, err := again.CombinedOutput(); err == nil || !strings.Contains(string(msg), "not the head") {
		t.Errorf("releasing %s again: %v\n%s", head, err, tail(string(msg), 10))
	}
}

func gitStatus(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "git", "-C", root, "status", "--porcelain", "--untracked-files=all").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// versionMention finds the operator's versions in user docs: image tags, CSV names,
// VERSION= arguments and "Upgrading from".
var versionMention = regexp.MustCompile(`(phalanks-operator(?:-bundle|-catalog|-scorecard-tests)?[:.]v|VERSION=|[Uu]pgrading from )([0-9]+\.[0-9]+\.[0-9]+)`)

// TestVersionsAgree checks that the head being developed is one version everywhere (the
// Makefile, bundle/, the catalog's channel head), that CHANGELOG.md has a dated section
// for every frozen release and none for the head, and that the docs name only versions
// that exist: a frozen release, or the head and what a release after it would be (an
// example of the next one). An upgrade is only ever from a frozen release.
func TestVersionsAgree(t *testing.T) {
	ctx := t.Context()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	head, err := release.HeadVersion(root)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := release.FrozenReleases(root)
	if err != nil {
		t.Fatal(err)
	}
	working, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if !working.CSV.Spec.Version.Equals(head) {
		t.Errorf("bundle/ is %s, the Makefile's VERSION %s: run make bundle", working.CSV.Spec.Version, head)
	}
	cfg, err := catalog.Load(ctx, catalog.PackageDir(root))
	if err != nil {
		t.Fatal(err)
	}
	if h := catalog.Head(cfg); h != bundle.PackageName+".v"+head.String() {
		t.Errorf("the catalog's head is %s, the Makefile's VERSION %s: run make catalog", h, head)
	}

	text, err := os.ReadFile(filepath.Join(root, release.Changelog))
	if err != nil {
		t.Fatal(err)
	}
	sections := regexp.MustCompile(`(?m)^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$`).FindAllStringSubmatch(string(text), -1)
	var dated []string
	for i, s := range sections {
		switch {
		case i == 0 && s[1] != "Unreleased":
			t.Errorf("CHANGELOG.md opens with %q, not the [Unreleased] section of the head", s[0])
		case i > 0 && s[2] == "":
			t.Errorf("CHANGELOG.md's section %q has no date", s[0])
		case i > 0:
			dated = append(dated, s[1])
		}
	}
	var want []string
	for i := len(frozen) - 1; i >= 0; i-- {
		want = append(want, frozen[i].String())
	}
	if strings.Join(dated, " ") != strings.Join(want, " ") {
		t.Errorf("CHANGELOG.md has sections for %v, the frozen releases newest first are %v", dated, want)
	}

	nextMinor := semver.Version{Major: head.Major, Minor: head.Minor + 1}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(docs, filepath.Join(root, "README.md"), filepath.Join(root, release.Changelog)) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range versionMention.FindAllStringSubmatch(line, -1) {
				v := semver.MustParse(m[2])
				isFrozen := false
				for _, f := range frozen {
					isFrozen = isFrozen || f.Equals(v)
				}
				switch {
				case strings.HasPrefix(strings.ToLower(m[1]), "upgrading from") && !isFrozen:
					t.Errorf("%s:%d: %q: an upgrade is from a released version, and %s is not one (released: %v)", rel, i+1, m[0], v, frozen)
				case !isFrozen && (v.LT(head) || v.GT(nextMinor)):
					t.Errorf("%s:%d: %q names %s, which is neither released (%v) nor the head %s or a release after it", rel, i+1, m[0], v, frozen, head)
				}
			}
		}
	}
}
