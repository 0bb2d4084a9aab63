package scaling

import (
	"context"
	"fmt"
	"maps"
	"slices"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// hpaTargetIndex indexes HorizontalPodAutoscalers by "<group>/<Kind>/<name>" of their
// target.
const hpaTargetIndex = "phalanks.io/scale-target"

func targetKey(gk schema.GroupKind, name string) string { return gk.Group + "/" + gk.Kind + "/" + name }

// hpaTargets is the hpaTargetIndex of an autoscaler.
func hpaTargets(h *autoscalingv2.HorizontalPodAutoscaler) []string {
	ref := h.Spec.ScaleTargetRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil
	}
	return []string{targetKey(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, ref.Name)}
}

func namespaceObject() client.Object { return &corev1.Namespace{} }
func hpaObject() client.Object       { return &autoscalingv2.HorizontalPodAutoscaler{} }

// newCache returns the scaler's own cache. Every kind is watched cluster-wide, but only
// what decisions read is kept (identity, the controller reference, phalanks.io
// annotations and the level), so a cluster full of objects that never use scheduled
// scaling costs a few hundred bytes each. Kinds found at run time keep their metadata
// alone. The manager's shared cache is left alone: other controllers may need whole
// objects.
func newCache(mgr manager.Manager, resources []string) (cache.Cache, error) {
	// Protobuf halves what the API server spends encoding watch events of built-in kinds.
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	byObject := map[client.Object]cache.ByObject{
		namespaceObject(): {Transform: slimNamespace},
		hpaObject():       {Transform: slimHPA},
		configMapObject(): {Label: calendarSelector, Transform: slimConfigMap},
	}
	for _, k := range builtinKinds {
		// HPAs are always watched (above), for the workloads they target.
		if k != horizontalPodAutoscalers && slices.Contains(resources, k.resource) {
			byObject[k.newObject()] = cache.ByObject{Transform: k.transform}
		}
	}
	if slices.Contains(resources, pdbResource) {
		byObject[&policyv1.PodDisruptionBudget{}] = cache.ByObject{Transform: slimPDB}
		byObject[podMetadata()] = cache.ByObject{Field: unfinishedPods, Transform: slimPod}
	}
	c, err := cache.New(cfg, cache.Options{
		Scheme:           mgr.GetScheme(),
		Mapper:           mgr.GetRESTMapper(),
		ByObject:         byObject,
		DefaultTransform: slimDiscovered,
	})
	if err != nil {
		return nil, fmt.Errorf("create scaling cache: %w", err)
	}
	err = c.IndexField(context.Background(), hpaObject(), hpaTargetIndex, func(o client.Object) []string {
		return hpaTargets(o.(*autoscalingv2.HorizontalPodAutoscaler))
	})
	if err != nil {
		return nil, fmt.Errorf("index autoscalers by target: %w", err)
	}
	return c, nil
}

// slimDiscovered slims what the cache holds of kinds found at run time: the metadata
// of objects scaled through /scale and of CRDs, and KEDA ScaledObjects.
func slimDiscovered(obj any) (any, error) {
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		return &metav1.PartialObjectMetadata{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(o.ObjectMeta)}, nil
	default:
		return slimScaledObject(obj)
	}
}

// relevantNamespace reports whether a Namespace's annotations or the operator's
// defaults give schedules to what of kind k is in it.
func relevantNamespace(ns *corev1.Namespace, p *policy, k *kind) bool {
	if p.excluded(ns.Name, ns.Labels) || !p.defaultKinds[k.resource] {
		return false
	}
	return namespaceInScope(ns.Annotations) || p.defaults != nil
}

// objectPredicate passes events of objects of kind k that scheduled scaling concerns,
// and only changes to what decisions read.
func objectPredicate(k *kind, s *scaler) predicate.TypedFuncs[client.Object] {
	relevant := func(o client.Object) bool {
		switch {
		case k.skip != nil && k.skip(o):
			return false
		case k.ownScheduleOnly:
			_, saved := o.GetAnnotations()[AnnotationOriginalReplicas]
			return ownSchedule(o.GetAnnotations()) || saved
		case k.extraLayer != nil || inScope(o.GetAnnotations()):
			// A ScaledObject may take its schedule from its target: pass them all, they
			// are few.
			return true
		}
		ns := &corev1.Namespace{}
		if err := s.cache.Get(context.Background(), types.NamespacedName{Name: o.GetNamespace()}, ns); err != nil {
			// A Namespace the cache does not hold yet: the reconcile waits for it.
			return true
		}
		return relevantNamespace(ns, s.current(), k)
	}
	return predicate.TypedFuncs[client.Object]{
		CreateFunc: func(e event.TypedCreateEvent[client.Object]) bool { return relevant(e.Object) },
		DeleteFunc: func(e event.TypedDeleteEvent[client.Object]) bool { return relevant(e.Object) },
		UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
			old, cur := e.ObjectOld, e.ObjectNew
			changed := !maps.Equal(old.GetAnnotations(), cur.GetAnnotations()) ||
				old.GetGeneration() != cur.GetGeneration() ||
				!equality.Semantic.DeepEqual(old.GetOwnerReferences(), cur.GetOwnerReferences()) ||
				old.GetDeletionTimestamp().IsZero() != cur.GetDeletionTimestamp().IsZero()
			return changed && (relevant(old) || relevant(cur))
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return true },
	}
}

// namespaceHandler re-decides every object of kind k in a Namespace whose scheduling
// annotations or labels changed.
func namespaceHandler(k *kind, reader client.Reader) handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, ns client.Object) []reconcile.Request {
		return requestsFor(ctx, reader, k.newList(), client.InNamespace(ns.GetName()))
	})
}

// requestsFor returns a request for every object reader lists into list; none when the
// list fails.
func requestsFor(ctx context.Context, reader client.Reader, list client.ObjectList, opts ...client.ListOption) []reconcile.Request {
	if err := reader.List(ctx, list, opts...); err != nil {
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
}

// namespaceKeys are the annotations of a Namespace that decisions read.
var namespaceKeys = append(slices.Clone(userKeys), AnnotationShadowCalendars)

// namespacePredicate passes Namespaces whose scheduling annotations (the calendars
// they let shadow the shared ones included) or labels changed.
func namespacePredicate() predicate.TypedFuncs[client.Object] {
	scheduling := func(o client.Object) map[string]string {
		out := map[string]string{}
		for _, k := range namespaceKeys {
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
			return !maps.Equal(scheduling(e.ObjectOld), scheduling(e.ObjectNew)) ||
				!maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	}
}

// hpaHandler re-decides the object of kind k an autoscaler targets.
func hpaHandler(k *kind) handler.TypedEventHandler[client.Object, reconcile.Request] {
	gk := k.gvk.GroupKind()
	return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ref := o.(*autoscalingv2.HorizontalPodAutoscaler).Spec.ScaleTargetRef
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || ref.Kind != gk.Kind || gv.Group != gk.Group {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
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
				!equality.Semantic.DeepEqual(old.Spec, cur.Spec) ||
				!equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences)
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	}
}
