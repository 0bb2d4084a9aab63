// Package bundle generates the OLM bundle (bundle/ and bundle.Dockerfile) from the tree:
// `kustomize build` of config/manifests, config/samples and config/scorecard, the CSV
// markers on the API types, and the icon next to the CSV base.
package bundle

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
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Inputs is everything a bundle is assembled from.
type Inputs struct {
	// Manifests is `kustomize build config/manifests`: the CSV base and the operator's
	// deployment manifests.
	Manifests []*unstructured.Unstructured
	// Samples is `kustomize build config/samples`; examples of owned kinds become
	// alm-examples, anything else there only serves the demo.
	Samples []*unstructured.Unstructured
	// Scorecard is `kustomize build config/scorecard`: one scorecard Configuration.
	Scorecard []*unstructured.Unstructured
	// Kinds describes each API kind and version from its Go type.
	Kinds map[schema.GroupVersionKind]KindDescription
	// Icon is the operator's SVG icon.
	Icon []byte
}

// IconPath is the operator icon, relative to the repository root.
const IconPath = "config/manifests/bases/icon.svg"

// ReadInputs renders the kustomizations with the kustomize binary and reads the API types
// and the icon of the repository at root.
func ReadInputs(ctx context.Context, root, kustomize string) (*Inputs, error) {
	in := &Inputs{}
	for _, k := range []struct {
		dir string
		out *[]*unstructured.Unstructured
	}{
		{"config/manifests", &in.Manifests},
		{"config/samples", &in.Samples},
		{"config/scorecard", &in.Scorecard},
	} {
		objs, err := kustomizeBuild(ctx, kustomize, filepath.Join(root, k.dir))
		if err != nil {
			return nil, err
		}
		*k.out = objs
	}
	kinds, err := LoadKindDescriptions(root)
	if err != nil {
		return nil, err
	}
	in.Kinds = kinds
	if in.Icon, err = os.ReadFile(filepath.Join(root, IconPath)); err != nil {
		return nil, fmt.Errorf("read icon: %w", err)
	}
	return in, nil
}

func kustomizeBuild(ctx context.Context, kustomize, dir string) ([]*unstructured.Unstructured, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kustomize, "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, stderr.String())
	}
	objs, err := DecodeObjects(out)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return objs, nil
}

// DecodeObjects decodes a multi-document YAML or JSON stream, skipping empty documents.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode: %w", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Generate reads the tree at root and renders the bundle's files (see Bundle.Files).
func Generate(ctx context.Context, root, kustomize string, p Params) (map[string][]byte, error) {
	in, err := ReadInputs(ctx, root, kustomize)
	if err != nil {
		return nil, err
	}
	b, err := Assemble(in, p)
	if err != nil {
		return nil, err
	}
	return b.Files()
}
