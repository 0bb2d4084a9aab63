package makefile_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// make vulncheck fails when the code calls a function with a known vulnerability: it runs
// on a program that calls language.Parse of golang.org/x/text v0.3.6 (GO-2021-0113), with
// the offline database of the vuln tool set. (make test runs it on the manager and the
// plugin, where it must pass.)
func TestVulncheckFailsOnACalledVulnerability(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-s", "vulncheck",
		"VULNCHECK_DIR=test/makefile/testdata/vulnerable", "VULNCHECK_PACKAGES=.")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make vulncheck passed on a program calling a vulnerable function:\n%s", out)
	}
	for _, want := range []string{"GO-2021-0113", "language.Parse"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make vulncheck's output lacks %q:\n%s", want, out)
		}
	}
}
