package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	return s
}()

// adapter prepares a sample for the demo environment, e.g. points a StorageBucket at
// the demo's MinIO. Features register theirs in init.
type adapter func(ctx context.Context, e *env, obj *unstructured.Unstructured) error

// expectation reports whether a sample reached the state the demo expects of its kind,
// and a short description of where it is.
type expectation func(ctx context.Context, e *env, obj *unstructured.Unstructured) (done bool, state string, err error)

var (
	adapters     = map[schema.GroupKind]adapter{}
	expectations = map[schema.GroupKind]expectation{}
)

// sampleDirs are the kustomizations the demo applies: the custom resources (which the
// bundle's alm-examples come from, so they hold nothing else) and the workloads that
// show scheduled scaling.
var sampleDirs = []string{"config/samples", "config/samples/workloads"}

// applySamples renders sampleDirs with kustomize and applies each object, adapted, into
// the demo namespace.
func (e *env) applySamples(ctx context.Context) ([]*unstructured.Unstructured, error) {
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, d := range sampleDirs {
		rendered, err := exec.CommandContext(ctx, kustomize, "build", filepath.Join(e.root, d)).Output()
		if err != nil {
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				return nil, fmt.Errorf("kustomize build %s: %w: %s", d, err, exitErr.Stderr)
			}
			return nil, fmt.Errorf("kustomize build %s: %w", d, err)
		}
		out = append(append(out, rendered...), "\n---\n"...)
	}
	var samples []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decode samples: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		obj.SetNamespace(demoNamespace)
		if a := adapters[obj.GroupVersionKind().GroupKind()]; a != nil {
			if err := a(ctx, e, obj); err != nil {
				return nil, fmt.Errorf("prepare sample %s: %w", describe(obj), err)
			}
		}
		if err := e.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("phalanks-demo"), client.ForceOwnership); err != nil {
			return nil, fmt.Errorf("apply sample %s: %w", describe(obj), err)
		}
		samples = append(samples, obj)
	}
	return samples, nil
}

func describe(obj *unstructured.Unstructured) string {
	return strings.ToLower(obj.GetKind()) + "/" + obj.GetName()
}

// kindsArg lists the sample kinds for a kubectl get command line.
func kindsArg(samples []*unstructured.Unstructured) string {
	seen := map[string]bool{}
	var kinds []string
	for _, s := range samples {
		k := strings.ToLower(s.GetKind())
		if s.GroupVersionKind().Group != "" {
			k += "." + s.GroupVersionKind().Group
		}
		if !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	if len(kinds) == 0 {
		return "all"
	}
	return strings.Join(kinds, ",")
}
