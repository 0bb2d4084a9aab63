package samples

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FooKind is the Foo sample's kind.
var FooKind = schema.GroupKind{Group: "phalanks.io", Kind: "Foo"}

// adaptFoo gives the Foo's Deployment the environment's image: the sample's cannot be
// pulled here.
func adaptFoo(_ context.Context, e Env, obj *unstructured.Unstructured) error {
	return unstructured.SetNestedField(obj.Object, e.Image, "spec", "image")
}

// fooAvailable is done when the Foo's Deployment is Available and the Foo reports as
// many available replicas as it asks for.
func fooAvailable(ctx context.Context, e Env, obj *unstructured.Unstructured) (bool, string, error) {
	name, _, _ := unstructured.NestedString(obj.Object, "spec", "deploymentName")
	want, found, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if !found {
		want = 1
	}
	available, _, _ := unstructured.NestedInt64(obj.Object, "status", "availableReplicas")
	dep := &appsv1.Deployment{}
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}, dep); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("waiting for Deployment %s", name), nil
		}
		return false, "", err
	}
	ready, err := readyPods(ctx, e.Client, dep)
	if err != nil {
		return false, "", err
	}
	state := fmt.Sprintf("Deployment %s: %d/%d available, %d pods Ready; Foo reports %d", name, dep.Status.AvailableReplicas, want, ready, available)
	return available == want && int64(ready) == want && deploymentAvailable(dep), state, nil
}

func deploymentAvailable(dep *appsv1.Deployment) bool {
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
