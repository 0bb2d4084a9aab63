// Package samples applies the project's examples (config/samples, the CSV's
// alm-examples) to a local cluster, the way `make demo` and the end-to-end suites show the
// very samples users see working: each sample adapted to what the cluster has
// (StorageBuckets pointed at the test's MinIO with its credentials, pods running the
// node's testapp image instead of images that cannot be pulled here), and an expected
// state per kind (a StorageBucket Ready, a Foo's Deployment available). Callers may
// replace the adapter or expectation of a kind (the demo gives the scheduled-scaling
// sample a downtime window that opens in a minute).
package samples

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/test/harness/minio"
	"github.com/phalanks/phalanks-operator/test/harness/tools"
)

// Env is what the samples are adapted to.
type Env struct {
	// Client applies the samples and reads them back.
	Client client.Client
	// S3 is the MinIO the StorageBucket samples point at; a pod reaches it at its
	// Endpoint.
	S3 *minio.Server
	// Image is what every sample's pods run.
	Image string
	// Namespace receives the samples.
	Namespace string
}

// Adapter prepares a sample for the environment before it is applied.
type Adapter func(ctx context.Context, e Env, obj *unstructured.Unstructured) error

// Expectation reports whether a sample reached the state expected of its kind, and a
// short description of where it is.
type Expectation func(ctx context.Context, e Env, obj *unstructured.Unstructured) (done bool, state string, err error)

// Kind names a sample's kind, as adapters and expectations are keyed.
type Kind = schema.GroupKind

// Adapters returns the adapter of every sample kind: StorageBucket, Foo and workloads.
func Adapters() map[Kind]Adapter {
	return map[Kind]Adapter{StorageBucketKind: adaptStorageBucket, FooKind: adaptFoo, DeploymentKind: adaptWorkload}
}

// Expectations returns the expected state of every sample kind that has one; a sample
// of another kind is done once it exists.
func Expectations() map[Kind]Expectation {
	return map[Kind]Expectation{StorageBucketKind: storageBucketReady, FooKind: fooAvailable}
}

// DeploymentKind is the kind of the scheduled-scaling sample.
var DeploymentKind = Kind{Group: "apps", Kind: "Deployment"}

// Dirs are the sample kustomizations: the custom resources (which the bundle's
// alm-examples come from, so they hold nothing else) and the workloads that show
// scheduled scaling.
var Dirs = []string{"config/samples", "config/samples/workloads"}

// Render returns the samples of Dirs as kustomize builds them.
func Render(ctx context.Context) ([]*unstructured.Unstructured, error) {
	root, err := tools.RepoRoot()
	if err != nil {
		return nil, err
	}
	kustomize, err := tools.Path("kustomize")
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, d := range Dirs {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, kustomize, "build", filepath.Join(root, d))
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %w: %s", d, err, stderr.String())
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decode %s: %w", d, err)
			}
			if len(obj.Object) > 0 {
				objs = append(objs, obj)
			}
		}
	}
	return objs, nil
}

// Apply renders the samples and applies each one, adapted by the adapter of its
// kind, into the environment's namespace with server-side apply as fieldOwner. It
// returns the samples as applied.
func Apply(ctx context.Context, e Env, adapters map[Kind]Adapter, fieldOwner string) ([]*unstructured.Unstructured, error) {
	objs, err := Render(ctx)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		obj.SetNamespace(e.Namespace)
		if a := adapters[obj.GroupVersionKind().GroupKind()]; a != nil {
			if err := a(ctx, e, obj); err != nil {
				return nil, fmt.Errorf("prepare sample %s: %w", Describe(obj), err)
			}
		}
		if err := e.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return nil, fmt.Errorf("apply sample %s: %w", Describe(obj), err)
		}
	}
	return objs, nil
}

// Check reads a sample back and checks it against the expectation of its kind.
func Check(ctx context.Context, e Env, expectations map[Kind]Expectation, sample *unstructured.Unstructured) (done bool, state string) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(sample.GroupVersionKind())
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(sample), live); err != nil {
		return false, err.Error()
	}
	check := expectations[sample.GroupVersionKind().GroupKind()]
	if check == nil {
		return true, "exists"
	}
	done, state, err := check(ctx, e, live)
	if err != nil {
		return false, err.Error()
	}
	return done, state
}

// Describe names a sample: kind/name.
func Describe(obj *unstructured.Unstructured) string {
	return strings.ToLower(obj.GetKind()) + "/" + obj.GetName()
}
