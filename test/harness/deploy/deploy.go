// Package deploy deploys the operator the way its users do: with the Makefile's
// deployment targets (`make deploy`, `make deploy-monitoring`, `make undeploy`) run
// against a test cluster's kubeconfig. It also renders the kustomize configurations
// under config/ for tests that check what they contain.
package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Image returns the operator image config/manager deploys (its kustomization's images
// entry for "controller"): the image a release publishes as IMG, and the name `make
// docker-build` stores the image under.
func Image() (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	path := filepath.Join(root, "config", "manager", "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var k struct {
		Images []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	for _, i := range k.Images {
		if i.Name == "controller" && i.NewName != "" && i.NewTag != "" {
			return i.NewName + ":" + i.NewTag, nil
		}
	}
	return "", fmt.Errorf("%s sets no image for controller", path)
}

// Make runs a target of the repository's Makefile against the cluster of kubeconfig,
// with the given variables ("IMG=…"), and returns its output.
//
// make deploy and deploy-monitoring first regenerate the CRDs and RBAC (make
// manifests); Make skips that step (make -o manifests): `make test` regenerates and
// checks them before any test runs (make verify), and regenerating here would rewrite
// files that other test packages read at the same time. Everything else the target
// does (building its tool sets, rendering and applying) runs as it does for a user.
func Make(ctx context.Context, kubeconfig, target string, vars ...string) (string, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return "", err
	}
	args := append([]string{"-C", root, "--no-print-directory", "-o", "manifests", target}, vars...)
	cmd := exec.CommandContext(ctx, "make", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("make %s: %w:\n%s", target, err, out)
	}
	return string(out), nil
}

// Render returns a directory under config/ ("config/default") as kustomize builds it.
func Render(ctx context.Context, dir string) ([]*unstructured.Unstructured, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, kustomize, "build", filepath.Join(root, dir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, stderr.String())
	}
	return Decode(out)
}

// Decode splits a multi-document YAML (or JSON) stream into objects.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifests: %w", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}
