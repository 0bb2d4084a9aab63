package makefile_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// .ci/run's side_by_side fails when one of its targets fails, in a chain ("a+b") too,
// and says which failed: the steps run inside `timed … || exit 1`, where bash ignores
// set -e, so timed must return the command's status itself (it once printed a failed
// make test-olmv1 as passed, and CI passed with it). The functions are taken from
// .ci/run as they are, with make replaced by a function that runs its argument.
func TestCIRunFailsWhenATargetRunSideBySideFails(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	var functions []string
	for _, name := range []string{"timed", "side_by_side"} {
		def := regexp.MustCompile(`(?ms)^` + name + `\(\) \{\n.*?^\}\n`).Find(script)
		if def == nil {
			t.Fatalf(".ci/run has no function %s", name)
		}
		functions = append(functions, string(def))
	}
	run := func(targets string) (string, error) {
		src := "set -euo pipefail\nmake() { \"$@\"; }\n" + strings.Join(functions, "\n") + "\nside_by_side " + targets + "\necho all-passed\n"
		out, err := exec.Command("bash", "-c", src).CombinedOutput()
		return string(out), err
	}
	for _, targets := range []string{"true false", "true+false true", "false+true"} {
		out, err := run(targets)
		if err == nil || strings.Contains(out, "all-passed") {
			t.Errorf("side_by_side %s passed:\n%s", targets, out)
		}
		if !strings.Contains(out, "ci: ── make false FAILED") {
			t.Errorf("side_by_side %s does not say make false failed:\n%s", targets, out)
		}
		if strings.Contains(out, "make false passed") {
			t.Errorf("side_by_side %s says make false passed:\n%s", targets, out)
		}
	}
	if out, err := run("true true+true"); err != nil || !strings.Contains(out, "all-passed") {
		t.Errorf("side_by_side of passing targets failed (%v):\n%s", err, out)
	}
}
