package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// TestTheKrewManifestValidatesAndInstallsThePlugin renders the manifest for this
// machine's platform, checks it with krew's own validator, installs the plugin from its
// archive with krew into a private krew root and runs the installed binary.
func TestTheKrewManifestValidatesAndInstallsThePlugin(t *testing.T) {
	validator, err := tools.Path("validate-krew-manifest")
	if err != nil {
		t.Fatal(err)
	}
	krew, err := tools.Path("krew")
	if err != nil {
		t.Fatal(err)
	}
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if err := run(root, "v0.2.0", out, "https://example.invalid/v0.2.0", platform); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(out, "phalanks.yaml")

	cmd := exec.Command(validator, "-manifest", manifest, "-skip-install")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("validate-krew-manifest: %v\n%s", err, b)
	}

	krewRoot := t.TempDir()
	archive := filepath.Join(out, "kubectl-phalanks_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz")
	cmd = exec.Command(krew, "install", "--manifest", manifest, "--archive", archive)
	cmd.Env = append(os.Environ(), "KREW_ROOT="+krewRoot, "KREW_NO_UPGRADE_CHECK=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("krew install: %v\n%s", err, b)
	}
	// What krew's index checks when it installs a plugin: the license came with it.
	licenses, err := filepath.Glob(filepath.Join(krewRoot, "store", "phalanks", "v0.2.0", "LICENSE"))
	if err != nil || len(licenses) != 1 {
		t.Errorf("no LICENSE installed with the plugin: %v", err)
	}
	b, err := exec.Command(filepath.Join(krewRoot, "bin", "kubectl-phalanks"), "help").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "kubectl phalanks") {
		t.Fatalf("the installed plugin: %v\n%s", err, b)
	}
}
