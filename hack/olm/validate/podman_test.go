//go:build podman

package validate_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// TestOperatorSDKMultiarchValidatorWithPodman runs `operator-sdk bundle validate
// --select-optional name=multiarch` with podman as its container tool on the bundle
// `make bundle USE_IMAGE_DIGESTS=true` generates against the operator and scorecard-test
// images built here and pushed to a registry on loopback. It needs podman (Debian's) and root, so it is not part of make test: run it
// with make validate-multiarch. podman keeps its storage in a temporary directory.
func TestOperatorSDKMultiarchValidatorWithPodman(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman: %v (apt-get install podman)", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := imagebuild.StartRegistry("127.0.0.1:0", imagebuild.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reg.Close() }()

	b := &images.Builder{Root: root, WorkDir: t.TempDir()}
	p := images.Params{Root: root, Version: "1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567"}
	operator, err := b.Build(ctx, images.Operator(p))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := imagebuild.Push(ctx, reg.Ref("phalanks/operator:v1.2.3"), operator, imagebuild.Options{})
	if err != nil {
		t.Fatal(err)
	}
	scorecard, err := b.Build(ctx, images.ScorecardTests(p))
	if err != nil {
		t.Fatal(err)
	}
	scorecardRef := reg.Ref("phalanks/scorecard-tests:v1.2.3")
	if _, err := imagebuild.Push(ctx, scorecardRef, scorecard, imagebuild.Options{}); err != nil {
		t.Fatal(err)
	}
	dir, err := bundle.Generate(ctx, root, t.TempDir(), bundle.Params{
		Version: p.Version, Image: reg.Ref("phalanks/operator:v1.2.3"), ScorecardImage: scorecardRef, UseImageDigests: true,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sdk, err := tools.Path("operator-sdk")
	if err != nil {
		t.Fatal(err)
	}

	// podman reads the loopback registry over plain HTTP and keeps its images apart.
	conf := t.TempDir()
	registries := filepath.Join(conf, "registries.conf")
	storage := filepath.Join(conf, "storage.conf")
	mustWrite(t, registries, fmt.Sprintf("[[registry]]\nlocation = %q\ninsecure = true\n", reg.Host))
	mustWrite(t, storage, fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(conf, "graph"), filepath.Join(conf, "run")))
	t.Setenv("CONTAINERS_REGISTRIES_CONF", registries)
	t.Setenv("CONTAINERS_STORAGE_CONF", storage)

	cmd := exec.CommandContext(ctx, sdk, "bundle", "validate", dir, "--select-optional", "name=multiarch",
		"--optional-values", "container-tools=podman")
	out, err := cmd.CombinedOutput()
	t.Logf("operator-sdk multiarch validator (podman) on a bundle pinned to %s:\n%s", pinned, out)
	if err != nil {
		t.Fatalf("operator-sdk bundle validate: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "level=warning") || strings.Contains(line, "level=error") {
			t.Errorf("finding: %s", line)
		}
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
