// Package bundle names the OLM bundle's fixed facts (its directory, package, channel and
// the manager's webhook wiring) and packages the tree as a bundle of any version the way a
// release does: `make bundle`, which runs operator-sdk, in a private copy of the tree.
//
// The bundle itself is operator-sdk's work (`operator-sdk generate kustomize manifests`
// and `generate bundle`, see the Makefile); nothing here assembles one.
package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	// Dir is the bundle directory `make bundle` writes, relative to the repository root.
	Dir = "bundle"
	// Dockerfile is the bundle image's Dockerfile `make bundle` writes next to Dir.
	Dockerfile = "bundle.Dockerfile"
	// PackageName is the OLM package (PROJECT's projectName).
	PackageName = "phalanks-operator"
	// Channel is the bundle's channel and default channel (the Makefile's CHANNELS).
	Channel = "stable"
	// ManagerContainer is the manager's container in the operator's Deployment.
	ManagerContainer = "manager"
	// ConversionPath is where the manager serves CRD conversion.
	ConversionPath = "/convert"
	// ALMExamplesAnnotation holds a CSV's example custom resources, as a JSON list.
	ALMExamplesAnnotation = "alm-examples"
)

// CSVFile is the CSV's path inside a bundle directory.
var CSVFile = filepath.Join("manifests", PackageName+".clusterserviceversion.yaml")

// ALMExamples parses a CSV's alm-examples; a CSV without them has none.
func ALMExamples(csv *operatorsv1alpha1.ClusterServiceVersion) ([]*unstructured.Unstructured, error) {
	raw := csv.GetAnnotations()[ALMExamplesAnnotation]
	if raw == "" {
		return nil, nil
	}
	var objs []map[string]any
	if err := json.Unmarshal([]byte(raw), &objs); err != nil {
		return nil, fmt.Errorf("parse %s: %w", ALMExamplesAnnotation, err)
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		out = append(out, &unstructured.Unstructured{Object: o})
	}
	return out, nil
}

// Params are the Makefile variables a release sets for `make bundle`.
type Params struct {
	// Version is VERSION: semver without a leading v.
	Version string
	// Image is IMG, the manager image; ScorecardImage is SCORECARD_TEST_IMG.
	Image, ScorecardImage string
	// UseImageDigests is USE_IMAGE_DIGESTS: operator-sdk pins the images the manifests
	// name (the manager's, in the CSV's Deployment, relatedImages and containerImage) by
	// the digest their registries hold. It does not pin the scorecard configuration:
	// ScorecardImage stays named by tag there.
	UseImageDigests bool
}

// Generate runs `make bundle` with p in a copy of the repository at root (the files git
// tracks or would track, so uncommitted work counts, committed in a fresh repository so
// that make bundle keeps the tree's createdAt as in the checkout) and returns the copy's
// bundle directory, with bundle.Dockerfile next to it. The repository itself is not
// touched: `make bundle` edits config/ (`kustomize edit set image`) as it does for users.
// Tool binaries come from the per-machine cache (hack/tools/build.sh). log receives
// make's output, which is also in the error when make fails.
func Generate(ctx context.Context, root, workDir string, p Params, log io.Writer) (string, error) {
	copyRoot := filepath.Join(workDir, "tree")
	if err := CopyRepository(ctx, root, copyRoot); err != nil {
		return "", err
	}
	args := []string{"-C", copyRoot, "--no-print-directory", "bundle", "VERSION=" + p.Version}
	if p.Image != "" {
		args = append(args, "IMG="+p.Image)
	}
	if p.ScorecardImage != "" {
		args = append(args, "SCORECARD_TEST_IMG="+p.ScorecardImage)
	}
	args = append(args, fmt.Sprintf("USE_IMAGE_DIGESTS=%t", p.UseImageDigests))
	var out strings.Builder
	w := io.Writer(&out)
	if log != nil {
		w = io.MultiWriter(&out, log)
	}
	cmd := Make(ctx, args...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("make bundle VERSION=%s: %w\n%s", p.Version, err, out.String())
	}
	return filepath.Join(copyRoot, Dir), nil
}

// Make returns a make command whose environment has none of a calling make's variables:
// a release runs make in its own checkout, and the caller's must not leak in.
func Make(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "make", args...)
	cmd.Env = withoutMakeVars(os.Environ())
	return cmd
}

// CopyRepository copies the files of the git work tree at root that git tracks or does
// not ignore (uncommitted work included) into dst, and commits them in a fresh repository
// there, so that what reads the history (the CSV's createdAt) sees the tree as a checkout.
func CopyRepository(ctx context.Context, root, dst string) error {
	if err := copyTree(ctx, root, dst); err != nil {
		return err
	}
	return commitAll(ctx, dst)
}

// copyTree copies the files of the git work tree at root that git tracks or does not
// ignore, keeping their modes, into dst.
func copyTree(ctx context.Context, root, dst string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	listed, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("list the files of %s: %w", root, err)
	}
	for name := range strings.SplitSeq(strings.TrimRight(string(listed), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, name)
		// World-readable, as a checkout is: the bundle is archived from here with its modes
		// (operator-sdk scorecard unpacks it in pods whose users differ).
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil { //nolint:gosec // G301: see above
			return err
		}
		if err := os.WriteFile(target, data, info.Mode().Perm()); err != nil { //nolint:gosec // G703: a path git lists in the repository, under dst
			return err
		}
	}
	return nil
}

// commitAll makes dir a git repository whose one commit holds every file in it.
func commitAll(ctx context.Context, dir string) error {
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=bundle.Generate", "-c", "user.email=bundle@localhost", "commit", "-q", "--no-gpg-sign", "-m", "tree"},
	} {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, out)
		}
	}
	return nil
}

// withoutMakeVars drops what a calling make passes down (MAKEFLAGS, MAKELEVEL, MFLAGS).
func withoutMakeVars(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if name == "MAKEFLAGS" || name == "MAKELEVEL" || name == "MFLAGS" {
			continue
		}
		out = append(out, kv)
	}
	return out
}
