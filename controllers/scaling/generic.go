package scaling

import (
	"context"
	"fmt"
	"math"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// scaleKind returns a kind scaled through its /scale subresource: any resource that
// serves one (Argo Rollouts, custom resources), found at run time, with no code of its
// own. The cache holds only its metadata; the replica count is read from /scale when
// a decision is made.
func scaleKind(gvk schema.GroupVersionKind, resource string) *kind {
	return &kind{
		traits:     traits{name: gvk.Kind},
		gvk:        gvk,
		resource:   resource,
		levelField: []string{"spec", "replicas"},
		newObject: func() client.Object {
			o := &metav1.PartialObjectMetadata{}
			o.SetGroupVersionKind(gvk)
			return o
		},
		newList: func() client.ObjectList {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			return l
		},
		autoscaled: true,
		read:       readScale,
		write:      writeThroughScale,
	}
}

// parentOf returns an unstructured stand-in of obj that addresses it in requests.
func parentOf(obj client.Object) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	return u
}

func newScale() *unstructured.Unstructured {
	s := &unstructured.Unstructured{}
	s.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	return s
}

// readScale reads spec.replicas from the object's /scale subresource.
func readScale(ctx context.Context, c client.Client, obj client.Object) (int32, error) {
	scale := newScale()
	if err := c.SubResource("scale").Get(ctx, parentOf(obj), scale); err != nil {
		return 0, fmt.Errorf("read the scale subresource: %w", err)
	}
	replicas, _, err := unstructured.NestedInt64(scale.Object, "spec", "replicas")
	if err != nil || replicas < 0 || replicas > math.MaxInt32 {
		return 0, fmt.Errorf("read the scale subresource: spec.replicas %d: %w", replicas, err)
	}
	return int32(replicas), nil
}

// writeThroughScale writes the operator's part of an object scaled through /scale. The
// count and the annotations live in two places, so it takes up to three requests, each
// with the resourceVersion the previous one returned, in an order that never loses a
// count:
//
//  1. at a scale-down, the count to restore is recorded first, with no next-transition
//     (that marks "not scaled for this downtime yet");
//  2. /scale is set;
//  3. the annotations are brought to their final state, next-transition included.
//
// Interrupted after 1, the next decision sees a saved count, no transition ahead and the
// old replicas, and scales down again (a manual change is told from this by the
// next-transition that 1 leaves out). Interrupted after 2, it sees the count already at
// its target and writes only 3.
func writeThroughScale(ctx context.Context, c client.Client, obj client.Object, w *workloadWrite) error {
	rv := obj.GetResourceVersion()
	var err error
	if w.level != w.from {
		if w.original != nil {
			record := &workloadWrite{original: w.original}
			if rv, err = applyAnnotations(ctx, c, obj, rv, record.annotationsFor(), nil); err != nil {
				return err
			}
		}
		if rv, err = setScale(ctx, c, obj, rv, w.level); err != nil {
			return err
		}
	}
	annotations := w.annotationsFor()
	_, err = applyAnnotations(ctx, c, obj, rv, annotations, ended(obj.GetAnnotations(), annotations, recordKeys...))
	return err
}

// applyAnnotations applies the operator's annotations to obj as they should be after
// the write, with rv as precondition, removes those of gone that another field manager
// kept (see applyEnding), and returns the new resourceVersion.
func applyAnnotations(ctx context.Context, c client.Client, obj client.Object, rv string, annotations map[string]string, gone []string) (string, error) {
	u := parentOf(obj)
	u.SetUID(obj.GetUID())
	u.SetResourceVersion(rv)
	u.SetAnnotations(annotations)
	gvk := obj.GetObjectKind().GroupVersionKind()
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("apply annotations to %s: %w", gvk.Kind, err)
	}
	if err := removeAnnotations(ctx, c, gvk, client.ObjectKeyFromObject(obj), u.GetAnnotations(), u.GetResourceVersion(), gone); err != nil {
		return "", err
	}
	return u.GetResourceVersion(), nil
}

// setScale sets spec.replicas through the /scale subresource with rv as precondition
// and returns the new resourceVersion. It is a merge patch, not a server-side apply:
// the API server cannot apply to the /scale subresource of a custom resource.
func setScale(ctx context.Context, c client.Client, obj client.Object, rv string, replicas int32) (string, error) {
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"replicas":%d}}`, rv, replicas)
	parent := parentOf(obj)
	scale := newScale()
	err := c.SubResource("scale").Patch(ctx, parent, client.RawPatch(types.MergePatchType, []byte(patch)),
		client.WithSubResourceBody(scale), client.FieldOwner(FieldManager))
	if err != nil {
		return "", fmt.Errorf("set replicas %d through the scale subresource: %w", replicas, err)
	}
	// The response, a Scale, carries the object's new resourceVersion.
	return scale.GetResourceVersion(), nil
}
