package scaling

import (
	"context"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// hpaTargetIndex indexes HorizontalPodAutoscalers that target an apps/v1 workload by
// "<kind>/<name>" of their target.
const hpaTargetIndex = "phalanks.io/scale-target"

// targetsApps reports whether an autoscaler targets a kind of the apps group.
func targetsApps(ref autoscalingv2.CrossVersionObjectReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == appsv1.GroupName
}

// newCache returns the scaler's own cache. Deployments and StatefulSets are watched
// cluster-wide, but only their identity, spec.replicas, controller reference and
// phalanks.io annotations are kept, so a cluster full of workloads that never use
// scheduled scaling costs a few hundred bytes each. The manager's shared cache is left
// alone: other controllers may need whole Deployments.
func newCache(mgr manager.Manager) (cache.Cache, error) {
	// Protobuf halves what the API server spends encoding watch events of built-in kinds.
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	c, err := cache.New(cfg, cache.Options{
		Scheme: mgr.GetScheme(),
		Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}:                     {Transform: deployments.slim},
			&appsv1.StatefulSet{}:                    {Transform: statefulSets.slim},
			&corev1.Namespace{}:                      {Transform: slimNamespace},
			&autoscalingv2.HorizontalPodAutoscaler{}: {Transform: slimHPA},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create scaling cache: %w", err)
	}
	err = c.IndexField(context.Background(), &autoscalingv2.HorizontalPodAutoscaler{}, hpaTargetIndex, func(o client.Object) []string {
		ref := o.(*autoscalingv2.HorizontalPodAutoscaler).Spec.ScaleTargetRef
		if !targetsApps(ref) {
			return nil
		}
		return []string{ref.Kind + "/" + ref.Name}
	})
	if err != nil {
		return nil, fmt.Errorf("index autoscalers by target: %w", err)
	}
	return c, nil
}

// relevant reports whether a workload uses scheduled scaling, itself or through its
// Namespace.
func relevant(ctx context.Context, reader client.Reader, o client.Object) bool {
	if inScope(o.GetAnnotations()) {
		return true
	}
	ns := &corev1.Namespace{}
	err := reader.Get(ctx, types.NamespacedName{Name: o.GetNamespace()}, ns)
	return err == nil && namespaceInScope(ns.Annotations)
}

// workloadPredicate passes events of workloads that use scheduled scaling, and only
// changes to what decisions read.
func workloadPredicate(k kind, reader client.Reader) predicate.TypedFuncs[client.Object] {
	ctx := context.Background()
	relevant := func(o client.Object) bool { return relevant(ctx, reader, o) }
	return predicate.TypedFuncs[client.Object]{
		CreateFunc: func(e event.TypedCreateEvent[client.Object]) bool { return relevant(e.Object) },
		DeleteFunc: func(e event.TypedDeleteEvent[client.Object]) bool { return relevant(e.Object) },
		UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
			old, cur := e.ObjectOld, e.ObjectNew
			changed := !maps.Equal(old.GetAnnotations(), cur.GetAnnotations()) ||
				k.replicas(old) != k.replicas(cur) ||
				!equality.Semantic.DeepEqual(old.GetOwnerReferences(), cur.GetOwnerReferences()) ||
				old.GetDeletionTimestamp().IsZero() != cur.GetDeletionTimestamp().IsZero()
			return changed && (relevant(old) || relevant(cur))
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return true },
	}
}

// namespaceHandler re-decides every workload of kind k in a Namespace whose scheduling
// defaults changed.
func namespaceHandler(k kind, reader client.Reader) handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, ns client.Object) []reconcile.Request {
		list := k.newList()
		if err := reader.List(ctx, list, client.InNamespace(ns.GetName())); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			if obj, ok := o.(client.Object); ok {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			}
			return nil
		})
		return reqs
	})
}

// namespacePredicate passes Namespaces whose scheduling annotations changed.
func namespacePredicate() predicate.TypedFuncs[client.Object] {
	scheduling := func(o client.Object) map[string]string {
		out := map[string]string{}
		for _, k := range append(append([]string{}, scheduleGroup...), exclusionGroup...) {
			if v, ok := o.GetAnnotations()[k]; ok {
				out[k] = v
			}
		}
		return out
	}
	return predicate.TypedFuncs[client.Object]{
		CreateFunc: func(e event.TypedCreateEvent[client.Object]) bool { return namespaceInScope(e.Object.GetAnnotations()) },
		DeleteFunc: func(event.TypedDeleteEvent[client.Object]) bool { return false },
		UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
			return !maps.Equal(scheduling(e.ObjectOld), scheduling(e.ObjectNew))
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	}
}

// hpaHandler re-decides the workload an autoscaler targets, if it uses scheduled scaling.
func hpaHandler(k kind, reader client.Reader) handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		ref := o.(*autoscalingv2.HorizontalPodAutoscaler).Spec.ScaleTargetRef
		if ref.Kind != k.name || !targetsApps(ref) {
			return nil
		}
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}
		target := k.newObject()
		if err := reader.Get(ctx, key, target); err != nil || !relevant(ctx, reader, target) {
			return nil
		}
		return []reconcile.Request{{NamespacedName: key}}
	})
}

// hpaPredicate passes autoscaler changes that matter to decisions, not status updates.
func hpaPredicate() predicate.TypedFuncs[client.Object] {
	return predicate.TypedFuncs[client.Object]{
		CreateFunc: func(event.TypedCreateEvent[client.Object]) bool { return true },
		DeleteFunc: func(event.TypedDeleteEvent[client.Object]) bool { return true },
		UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
			old := e.ObjectOld.(*autoscalingv2.HorizontalPodAutoscaler)
			cur := e.ObjectNew.(*autoscalingv2.HorizontalPodAutoscaler)
			return !maps.Equal(old.Annotations, cur.Annotations) ||
				!equality.Semantic.DeepEqual(old.Spec, cur.Spec)
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	}
}
