package scaling

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kind is what differs between the workload kinds the operator scales.
type kind struct {
	name      string
	newObject func() client.Object
	newList   func() client.ObjectList
	replicas  func(client.Object) int32
	// apply builds the operator's apply configuration for a workload.
	apply func(obj client.Object, w *workloadWrite) runtime.ApplyConfiguration
	// slim keeps what decisions read: metadata and spec.replicas.
	slim func(any) (any, error)
}

var kinds = []kind{deployments, statefulSets}

var deployments = kind{
	name:      "Deployment",
	newObject: func() client.Object { return &appsv1.Deployment{} },
	newList:   func() client.ObjectList { return &appsv1.DeploymentList{} },
	replicas:  func(o client.Object) int32 { return ptr.Deref(o.(*appsv1.Deployment).Spec.Replicas, 1) },
	apply: func(o client.Object, w *workloadWrite) runtime.ApplyConfiguration {
		return appsv1ac.Deployment(o.GetName(), o.GetNamespace()).
			WithUID(o.GetUID()).WithResourceVersion(o.GetResourceVersion()).
			WithAnnotations(w.annotationsFor()).
			WithSpec(appsv1ac.DeploymentSpec().WithReplicas(w.replicas))
	},
	slim: func(obj any) (any, error) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return obj, nil
		}
		return &appsv1.Deployment{ObjectMeta: slimMeta(d.ObjectMeta), Spec: appsv1.DeploymentSpec{Replicas: d.Spec.Replicas}}, nil
	},
}

var statefulSets = kind{
	name:      "StatefulSet",
	newObject: func() client.Object { return &appsv1.StatefulSet{} },
	newList:   func() client.ObjectList { return &appsv1.StatefulSetList{} },
	replicas:  func(o client.Object) int32 { return ptr.Deref(o.(*appsv1.StatefulSet).Spec.Replicas, 1) },
	apply: func(o client.Object, w *workloadWrite) runtime.ApplyConfiguration {
		return appsv1ac.StatefulSet(o.GetName(), o.GetNamespace()).
			WithUID(o.GetUID()).WithResourceVersion(o.GetResourceVersion()).
			WithAnnotations(w.annotationsFor()).
			WithSpec(appsv1ac.StatefulSetSpec().WithReplicas(w.replicas))
	},
	slim: func(obj any) (any, error) {
		s, ok := obj.(*appsv1.StatefulSet)
		if !ok {
			return obj, nil
		}
		return &appsv1.StatefulSet{ObjectMeta: slimMeta(s.ObjectMeta), Spec: appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas}}, nil
	},
}

// slimMeta keeps the identity, the operator's annotations and the controller reference:
// the pod template, managed fields and other annotations (a kubectl last-applied
// configuration can be larger than the rest of the object) never reach the cache.
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
		Annotations:       ourAnnotations(m.Annotations),
	}
	if ref := metav1.GetControllerOfNoCopy(&m); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return out
}

func ourAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, annotationPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

func slimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{ObjectMeta: slimMeta(ns.ObjectMeta)}, nil
}

// slimHPA keeps the target, minReplicas and the operator's annotations: the HPA
// controller rewrites status every sync, and none of that is needed here.
func slimHPA(obj any) (any, error) {
	h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return obj, nil
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: slimMeta(h.ObjectMeta),
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: h.Spec.ScaleTargetRef,
			MinReplicas:    h.Spec.MinReplicas,
			MaxReplicas:    h.Spec.MaxReplicas,
		},
	}, nil
}
