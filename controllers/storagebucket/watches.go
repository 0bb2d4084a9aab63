package storagebucket

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
)

// Field indexes on StorageBuckets, for finding the buckets a Secret or ConfigMap
// change affects.
const (
	// indexCredentials holds the credentials Secret's name.
	indexCredentials = "spec.credentialsSecretRef.name"
	// indexCABundle holds "<Kind>/<name>" of the CA bundle's ConfigMap or Secret.
	indexCABundle = "spec.caBundle.ref"
)

func setupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &phalanksv1beta1.StorageBucket{}, indexCredentials, func(o client.Object) []string {
		if ref := o.(*phalanksv1beta1.StorageBucket).Spec.CredentialsSecretRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("index StorageBuckets by credentials Secret: %w", err)
	}
	if err := idx.IndexField(ctx, &phalanksv1beta1.StorageBucket{}, indexCABundle, func(o client.Object) []string {
		sb := o.(*phalanksv1beta1.StorageBucket)
		if sb.Spec.CABundle == nil {
			return nil
		}
		_, name, kind := caRef(sb)
		return []string{kind + "/" + name}
	}); err != nil {
		return fmt.Errorf("index StorageBuckets by CA bundle: %w", err)
	}
	return nil
}

// referenceChanged handles changes of Secret or ConfigMap metadata: the StorageBuckets
// that reference a changed object are made due now and reach the controller through
// the ticker's channel like every other probe. Objects listed at start-up and resyncs
// (same resourceVersion) change nothing.
func (r *Reconciler) referenceChanged(kind string) handler.TypedEventHandler[client.Object, reconcile.Request] {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], _ queue) {
			if !e.IsInInitialList {
				r.triggerReferencing(ctx, kind, e.Object)
			}
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], _ queue) {
			if e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion() {
				r.triggerReferencing(ctx, kind, e.ObjectNew)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], _ queue) {
			r.triggerReferencing(ctx, kind, e.Object)
		},
	}
}

func (r *Reconciler) triggerReferencing(ctx context.Context, kind string, obj client.Object) {
	ref := refKey{kind: kind, NamespacedName: client.ObjectKeyFromObject(obj)}
	r.refs.forget(ref)
	selectors := []client.MatchingFields{{indexCABundle: kind + "/" + obj.GetName()}}
	if kind == "Secret" {
		selectors = append(selectors, client.MatchingFields{indexCredentials: obj.GetName()})
	}
	var keys []types.NamespacedName
	for _, sel := range selectors {
		var list phalanksv1beta1.StorageBucketList
		if err := r.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()), sel); err != nil {
			// The next scheduled probe notices the change through the fingerprint.
			logf.FromContext(ctx).Error(err, "list StorageBuckets referencing a changed object", "kind", kind, "object", ref.NamespacedName)
			continue
		}
		for i := range list.Items {
			keys = append(keys, client.ObjectKeyFromObject(&list.Items[i]))
		}
	}
	r.sched.TriggerNow(r.clock.Now(), keys...)
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
