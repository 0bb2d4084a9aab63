package scaling_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// TestTheDocsNameTheDefaultsTheOperatorHas: users act on what docs/scheduled-scaling.md
// says the defaults leave alone and reach, so it must say what the code does.
func TestTheDocsNameTheDefaultsTheOperatorHas(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "scheduled-scaling.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(data)), " ")
	var names []string
	for _, n := range scaling.DefaultExcludeNamespaces("") {
		names = append(names, "`"+n+"`")
	}
	for _, want := range []string{
		"is " + strings.Join(names, ", ") + ", and the operator's own namespace",
		"| `--default-scaling-kinds` | `" + strings.Join(scaling.DefaultScalingKinds, ",") + "` |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/scheduled-scaling.md does not say %q", want)
		}
	}
}
