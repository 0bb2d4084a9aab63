package scaling

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KEDA's ScaledObject and the annotations that pause it. With paused-replicas set, KEDA
// stops autoscaling, deletes the HPA it made and scales the target to that count; when
// the annotation goes, it recreates the HPA and autoscales again.
var scaledObjectGVK = schema.GroupVersionKind{Group: kedaGroup, Version: "v1alpha1", Kind: "ScaledObject"}

const (
	kedaAnnotationPrefix = "autoscaling.keda.sh/"
	// KEDAPausedReplicas is the ScaledObject annotation the operator sets for a downtime.
	KEDAPausedReplicas = kedaAnnotationPrefix + "paused-replicas"
	kedaPaused         = kedaAnnotationPrefix + "paused"
)

// scaledObjectKind is the kind of KEDA ScaledObjects. A ScaledObject takes its schedule
// from its own annotations, then from the workload it scales, then its Namespace and
// the operator's defaults: annotating the workload is enough. The workload itself is
// then left alone (see decide), so the schedule and KEDA never fight over its replicas.
// target finds the workload a ScaledObject scales in the scaling cache.
func scaledObjectKind(target func(ctx context.Context, reader client.Reader, namespace string, ref scaleTarget) (client.Object, *kind, bool)) *kind {
	return &kind{
		traits: traits{name: "ScaledObject", onOff: true,
			stopped: "paused (" + KEDAPausedReplicas + ")",
			running: "autoscaling (the operator's " + KEDAPausedReplicas + " removed)"},
		gvk:      scaledObjectGVK,
		resource: "scaledobjects." + kedaGroup,
		newObject: func() client.Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(scaledObjectGVK)
			return u
		},
		newList: func() client.ObjectList { return newScaledObjectList() },
		read: func(_ context.Context, _ client.Client, o client.Object) (int32, error) {
			return runningOrStopped(pausedByAnyone(o.GetAnnotations())), nil
		},
		write: func(ctx context.Context, c client.Client, o client.Object, w *workloadWrite) error {
			annotations := w.annotationsFor()
			if w.level == 0 {
				annotations[KEDAPausedReplicas] = fmt.Sprint(w.pausedReplicas)
			}
			// The pause ends with the operator's record: paused-replicas goes even when
			// someone changed it during the downtime, or KEDA would stay paused for good.
			gone := ended(o.GetAnnotations(), annotations, append(slices.Clone(recordKeys), KEDAPausedReplicas)...)
			_, err := applyAnnotations(ctx, c, o, o.GetResourceVersion(), annotations, gone)
			return err
		},
		transform: slimScaledObject,
		extraLayer: func(ctx context.Context, reader client.Reader, o client.Object) (layer, bool) {
			ref, ok := targetOf(o)
			if !ok {
				return layer{}, false
			}
			w, k, found := target(ctx, reader, o.GetNamespace(), ref)
			if !found {
				return layer{}, false
			}
			return layer{source: ref.kind + " " + ref.name, annotations: w.GetAnnotations(), resource: k.resource}, true
		},
	}
}

// pausedByAnyone reports whether a ScaledObject is paused, by the operator or anyone.
func pausedByAnyone(annotations map[string]string) bool {
	if _, ok := annotations[KEDAPausedReplicas]; ok {
		return true
	}
	v, ok := annotations[kedaPaused]
	// KEDA reads any value but a false boolean as true.
	return ok && !strings.EqualFold(strings.TrimSpace(v), "false") && strings.TrimSpace(v) != "0"
}

// scaleTarget is what a ScaledObject scales.
type scaleTarget struct {
	group, kind, name string
}

func (t scaleTarget) groupKind() schema.GroupKind {
	return schema.GroupKind{Group: t.group, Kind: t.kind}
}

// targetOf reads spec.scaleTargetRef; KEDA defaults it to an apps/v1 Deployment.
func targetOf(o client.Object) (scaleTarget, bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return scaleTarget{}, false
	}
	ref, found, _ := unstructured.NestedStringMap(u.Object, "spec", "scaleTargetRef")
	if !found || ref["name"] == "" {
		return scaleTarget{}, false
	}
	apiVersion, kind := ref["apiVersion"], ref["kind"]
	if apiVersion == "" {
		apiVersion = "apps/v1"
	}
	if kind == "" {
		kind = "Deployment"
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return scaleTarget{}, false
	}
	return scaleTarget{group: gv.Group, kind: kind, name: ref["name"]}, true
}

// scaledObjectFor returns the name of a ScaledObject in namespace that scales the
// object of gk and name, if there is one.
func scaledObjectFor(ctx context.Context, reader client.Reader, namespace string, gk schema.GroupKind, name string) (string, error) {
	list := newScaledObjectList()
	if err := reader.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("list ScaledObjects: %w", err)
	}
	for i := range list.Items {
		so := &list.Items[i]
		if t, ok := targetOf(so); ok && t.groupKind() == gk && t.name == name {
			return so.GetName(), nil
		}
	}
	return "", nil
}

func newScaledObjectList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(scaledObjectGVK.GroupVersion().WithKind("ScaledObjectList"))
	return l
}

// slimScaledObject keeps the identity, the operator's and KEDA's annotations and the
// target of ScaledObjects; it passes other objects through.
func slimScaledObject(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GroupVersionKind().GroupKind() != scaledObjectGVK.GroupKind() {
		return obj, nil
	}
	out := &unstructured.Unstructured{}
	out.SetGroupVersionKind(u.GroupVersionKind())
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetGeneration(u.GetGeneration())
	out.SetCreationTimestamp(u.GetCreationTimestamp())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	out.SetAnnotations(keepAnnotations(u.GetAnnotations(), annotationPrefix, kedaAnnotationPrefix))
	if ref := metav1.GetControllerOfNoCopy(u); ref != nil {
		out.SetOwnerReferences([]metav1.OwnerReference{*ref})
	}
	if ref, found, _ := unstructured.NestedMap(u.Object, "spec", "scaleTargetRef"); found {
		_ = unstructured.SetNestedMap(out.Object, ref, "spec", "scaleTargetRef")
	}
	return out, nil
}

// targetRequest is the workload a ScaledObject scales, as a request of kind gk.
func targetRequest(o client.Object, gk schema.GroupKind) (types.NamespacedName, bool) {
	t, ok := targetOf(o)
	if !ok || t.groupKind() != gk {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: t.name}, true
}
