package samples

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodCounts counts the pods a selector matches in a namespace: all of them,
// terminating ones included, and those Ready and not terminating.
func PodCounts(ctx context.Context, c client.Reader, namespace string, selector *metav1.LabelSelector) (all, ready int, err error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return 0, 0, err
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
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

func readyPods(ctx context.Context, c client.Reader, dep *appsv1.Deployment) (int, error) {
	_, ready, err := PodCounts(ctx, c, dep.Namespace, dep.Spec.Selector)
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

// adaptWorkload gives a workload sample's pods the environment's image.
func adaptWorkload(_ context.Context, e Env, obj *unstructured.Unstructured) error {
	return SetContainerImages(obj, e.Image)
}

// SetContainerImages gives every container of a workload sample's pod template image:
// the sample's cannot be pulled here.
func SetContainerImages(obj *unstructured.Unstructured, image string) error {
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
