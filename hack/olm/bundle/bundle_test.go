package bundle_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	apimanifests "github.com/operator-framework/api/pkg/manifests"

	"github.com/phalanks/phalanks-operator/hack/olm/bundle"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// TestTheCommittedBundleIsWhatMakeBundleGenerates: make bundle (operator-sdk), run with
// the committed bundle's version and images in a copy of the tree, writes exactly the
// committed bundle/ and bundle.Dockerfile. A hand-edited or stale bundle fails here, as
// make verify fails on it; so does a Generate that stopped running make bundle.
func TestTheCommittedBundleIsWhatMakeBundleGenerates(t *testing.T) {
	root, err := tools.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	committed, err := apimanifests.GetBundleFromDir(filepath.Join(root, bundle.Dir))
	if err != nil {
		t.Fatal(err)
	}
	image := committed.CSV.Annotations["containerImage"]
	dir, err := bundle.Generate(t.Context(), root, t.TempDir(), bundle.Params{
		Version: committed.CSV.Spec.Version.String(),
		Image:   image,
		// The committed bundle names the scorecard image make bundle's default derives.
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := readTree(t, filepath.Join(root, bundle.Dir))
	got := readTree(t, dir)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("make bundle does not write the committed bundle/ (-committed +generated):\n%s", diff)
	}
	wantDockerfile, err := os.ReadFile(filepath.Join(root, bundle.Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	gotDockerfile, err := os.ReadFile(filepath.Join(filepath.Dir(dir), bundle.Dockerfile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wantDockerfile, gotDockerfile) {
		t.Errorf("make bundle does not write the committed %s:\n%s", bundle.Dockerfile, cmp.Diff(string(wantDockerfile), string(gotDockerfile)))
	}
}

// readTree maps every file under dir, by relative path, to its content.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	tree := os.DirFS(dir)
	err := fs.WalkDir(tree, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(tree, path)
		out[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
