//go:build podman

package validate_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	apivalidation "github.com/operator-framework/api/pkg/validation"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/hack/olm/images"
	"github.com/phalanks/phalanks-operator/internal/imagebuild"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// TestOperatorSDKMultiarchValidatorWithPodman runs operator-framework/api's
// MultipleArchitecturesValidator itself — what `operator-sdk bundle validate
// --select-optional name=multiarch` runs — with podman as its container tool, on the
// bundle pinned by digest to the operator image built here and pushed to a registry on
// loopback. It needs podman (Debian's) and root, so it is not part of make test: run it
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
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		t.Fatal(err)
	}
	files, err := bundle.Generate(ctx, root, kustomize, bundle.Params{Version: p.Version, Image: pinned, ScorecardImage: reg.Ref("phalanks/scorecard-tests:v1.2.3")})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := bundle.Write(out, files); err != nil {
		t.Fatal(err)
	}
	loaded, err := apimanifests.GetBundleFromDir(filepath.Join(out, bundle.Dir))
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

	results := apivalidation.MultipleArchitecturesValidator.Validate(loaded, map[string]string{"container-tools": "podman"})
	var findings int
	for _, r := range results {
		for _, e := range r.Errors {
			t.Errorf("error: %v", e)
			findings++
		}
		for _, w := range r.Warnings {
			t.Errorf("warning: %v", w)
			findings++
		}
	}
	t.Logf("multiarch validator (podman) on a bundle pinned to %s: %d errors and warnings", pinned, findings)
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
