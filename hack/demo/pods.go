package main

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podCounts counts a Deployment's pods on the node: all of them, terminating ones
// included, and those Ready and not terminating.
func (e *env) podCounts(ctx context.Context, namespace string, selector *metav1.LabelSelector) (all, ready int, err error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return 0, 0, err
	}
	pods := &corev1.PodList{}
	if err := e.client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		all++
		if p.DeletionTimestamp == nil && podReady(&p) {
			ready++
		}
	}
	return all, ready, nil
}

func (e *env) readyPods(ctx context.Context, dep *appsv1.Deployment) (int, error) {
	_, ready, err := e.podCounts(ctx, dep.Namespace, dep.Spec.Selector)
	return ready, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setContainerImages gives every container of a workload sample's pod template the
// demo's image: the sample's cannot be pulled here.
func setContainerImages(obj *unstructured.Unstructured, image string) error {
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	for i := range containers {
		c, ok := containers[i].(map[string]any)
		if !ok {
			continue
		}
		c["image"] = image
	}
	return unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
}
