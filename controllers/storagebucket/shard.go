package storagebucket

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/sharding"
)

// Sharding. With a shard ring every replica runs this controller and handles only the
// StorageBuckets of its slots: it probes them, manages and deletes their buckets, and
// writes their status and finalizer. Management and deletion are sharded too, not
// kept on the elected leader: they act on one bucket each, every write carries a
// resourceVersion precondition (a replica that lost the bucket a moment ago loses
// the race and lets go), and creating or deleting a bucket is idempotent on S3, so a
// brief overlap during a handover cannot lose or duplicate anything. Keeping them on
// the leader would make the leader watch and hold every StorageBucket again.

var (
	shardSlots = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "phalanks_storagebucket_shard_slots",
		Help: "Hash range slots of the StorageBuckets this replica owns (of " + strconv.Itoa(sharding.Slots) + "); all of them without a shard ring.",
	})
	shardHandovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_shard_handovers_total",
		Help: "Changes of the owned slots.",
	})
	// cachedCount counts the StorageBuckets in the informer cache; set by setup.
	cachedCount   atomic.Pointer[func() int]
	cachedBuckets = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "phalanks_storagebucket_cached",
		Help: "StorageBuckets held in this replica's informer cache: its share with server-side sharding, all of them otherwise.",
	}, func() float64 {
		if f := cachedCount.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
)

func init() { metrics.Registry.MustRegister(shardSlots, shardHandovers, cachedBuckets) }

// setupShard joins the ring and returns the channel through which the buckets of
// slots that changed hands are reconciled: newly owned ones start on their probe grid,
// lost ones are forgotten. Without a ring the channel stays silent.
func (r *Reconciler) setupShard(mgr ctrl.Manager) (<-chan event.TypedGenericEvent[*phalanksv1beta1.StorageBucket], error) {
	handover := make(chan event.TypedGenericEvent[*phalanksv1beta1.StorageBucket], r.opts.Concurrency)
	count := func() int {
		list := &phalanksv1beta1.StorageBucketList{}
		if err := mgr.GetCache().List(context.Background(), list, client.UnsafeDisableDeepCopy); err != nil {
			return 0
		}
		return len(list.Items)
	}
	cachedCount.Store(&count)
	m := r.opts.Shard
	if m == nil {
		shardSlots.Set(sharding.Slots)
		return handover, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop := manager.RunnableFunc(func(c context.Context) error { <-c.Done(); cancel(); return nil })
	if err := mgr.Add(stop); err != nil {
		return nil, err
	}
	m.OnChange = func(old, owned sharding.Set) {
		shardSlots.Set(float64(owned.Len()))
		shardHandovers.Inc()
		go r.handOver(ctx, old^owned, handover)
	}
	if err := mgr.Add(m); err != nil {
		return nil, err
	}
	return handover, nil
}

// handOver reconciles every cached StorageBucket in the changed slots. With
// server-side sharding the informer also lists again: the buckets of new slots arrive
// as additions and those of lost slots leave as deletions, which reconcile the same way.
func (r *Reconciler) handOver(ctx context.Context, changed sharding.Set,
	to chan<- event.TypedGenericEvent[*phalanksv1beta1.StorageBucket]) {
	list := &phalanksv1beta1.StorageBucketList{}
	if err := r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	for i := range list.Items {
		sb := &list.Items[i]
		if !changed.Has(sharding.SlotOf(sb.UID)) {
			continue
		}
		select {
		case to <- event.TypedGenericEvent[*phalanksv1beta1.StorageBucket]{Object: sb}:
		case <-ctx.Done():
			return
		}
	}
}

// ownedOrDeleted lets through the events of this replica's buckets, and every
// deletion, so whatever the replica holds for a bucket goes with it.
func (r *Reconciler) ownedOrDeleted() predicate.Predicate {
	owned := func(o client.Object) bool { return r.owns(o.GetUID()) }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return owned(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return owned(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(e event.GenericEvent) bool { return owned(e.Object) },
	}
}
