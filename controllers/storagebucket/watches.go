package storagebucket

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// referenceChanged handles changes of Secret or ConfigMap metadata: the StorageBuckets
// whose last pass here referenced a changed object (refReader.usersOf: this replica's,
// without listing any) are made due now and reach the controller through the ticker's
// channel like every other probe. Objects listed at start-up and resyncs
// (same resourceVersion) change nothing. A Secret that gains the label that allows
// StorageBuckets to use it arrives as a creation, one that loses it as a deletion.
func referenceChanged[T client.Object](r *Reconciler, kind string) handler.TypedEventHandler[T, reconcile.Request] {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[T], _ queue) {
			if !e.IsInInitialList {
				r.triggerReferencing(kind, e.Object)
			}
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[T], _ queue) {
			if e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion() {
				r.triggerReferencing(kind, e.ObjectNew)
			}
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[T], _ queue) {
			r.triggerReferencing(kind, e.Object)
		},
	}
}

// triggerReferencing makes the users of a changed Secret or ConfigMap due now.
func (r *Reconciler) triggerReferencing(kind string, obj client.Object) {
	key := refKey{kind: kind, NamespacedName: client.ObjectKeyFromObject(obj)}
	r.sched.TriggerNow(r.clock.Now(), r.refs.usersOf(key)...)
}

// refOf names a StorageBucket for the scheduler.
func refOf(sb *phalanksv1beta1.StorageBucket) bucketRef {
	return bucketRef{UID: sb.UID, Key: client.ObjectKeyFromObject(sb)}
}

// newSecretInformer returns the cache of the metadata of the Secrets labelled
// phalanksv1beta1.LabelSecretAllowed: the only Secrets the operator reads, so the only
// ones it needs to know of. It is the controller's own, since the manager's cache cannot
// filter one kind by label without filtering it for every controller.
func newSecretInformer(mgr ctrl.Manager) (cache.Cache, error) {
	allowed := labels.SelectorFromSet(labels.Set{phalanksv1beta1.LabelSecretAllowed: "true"})
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		HTTPClient:           mgr.GetHTTPClient(),
		DefaultLabelSelector: allowed,
		DefaultTransform:     cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("create the Secret metadata cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("add the Secret metadata cache: %w", err)
	}
	return c, nil
}

// secretMetadata is the object the Secret informer holds.
func secretMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kindSecret))
	return m
}

// specOrLifecycleChanged passes the StorageBucket events that can change what the
// controller does: creation, deletion, spec (generation), annotations (adoption) and
// finalizers. The controller's own status writes do not pass.
func specOrLifecycleChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) || len(o.GetFinalizers()) != len(n.GetFinalizers())
		}},
	)
}
