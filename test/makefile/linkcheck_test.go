package makefile_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// make linkcheck (run by make test on every Markdown file of the repository) fails on a
// link to a file that does not exist, to a heading another file lacks, and to a heading
// of its own file that is not there, and names each; the same files with those links
// mended pass.
func TestLinkcheckFailsOnABrokenLinkOrAnchor(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	linkcheck := func() (string, error) {
		cmd := exec.Command("make", "-s", "linkcheck", "LINKCHECK_ROOT="+dir, "LINKCHECK_FILES=README.md docs")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	write("docs/install.md", "# Install\n\n## With OLM\n\nSee [the top](../README.md#usage).\n")
	write("README.md", "# Project\n\n## Usage\n\n"+
		"[ok](docs/install.md#with-olm) [gone](docs/uninstall.md) [no heading](docs/install.md#with-helm) [no anchor](#configuration)\n")
	out, err := linkcheck()
	if err == nil {
		t.Fatalf("make linkcheck passed with three broken links:\n%s", out)
	}
	for _, want := range []string{"docs/uninstall.md", "#with-helm", "#configuration"} {
		if !strings.Contains(out, want) {
			t.Errorf("make linkcheck's output does not name %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "#with-olm") || strings.Contains(out, "#usage") {
		t.Errorf("make linkcheck reported a link that resolves:\n%s", out)
	}

	write("README.md", "# Project\n\n## Usage\n\n## Configuration\n\n[ok](docs/install.md#with-olm) [here](#configuration)\n")
	if out, err := linkcheck(); err != nil {
		t.Fatalf("make linkcheck failed on links that resolve: %v\n%s", err, out)
	}
}
