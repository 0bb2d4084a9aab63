package storagebucket

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
	"github.com/phalanks/phalanks-operator/internal/sharding"
)

// Sharding. With a shard ring every replica runs this controller and handles only the
// StorageBuckets of its slots: it probes them, manages and deletes their buckets, and
// writes their status and finalizer. Management and deletion are sharded too, not
// kept on the elected leader; keeping them there would make the leader watch and hold
// every StorageBucket again.
//
// Five things keep a replica from acting on a bucket it no longer owns:
//   - every pass runs under the context of its slot, which the ring member makes and
//     cancels itself when the slot is given up or the ownership lapses, and the member
//     keeps a slot claimed until its passes ended (sharding.Member.Begin, End), so two
//     replicas never probe one bucket at once;
//   - every S3 request a pass sends is guarded: right before it leaves, the member is
//     asked whether it still holds the slot (sharding.Member.Holds, s3probe.WithGuard),
//     so none leaves after the ownership lapsed, however late the lapse's timer runs;
//   - every call that creates, tags or deletes a bucket, or empties it, is preceded by
//     a live read of the StorageBucket from the API server, which must still exist with
//     the same UID and be (or not be) being deleted, and an ownership check after that
//     read (the fence): a replica with a stale cache never re-creates a deleted
//     StorageBucket's bucket, nor deletes a re-created one's;
//   - the first pass of a StorageBucket after this replica took its slot reads it from
//     the API server before anything else (current): a cache that missed its deletion
//     by another replica never probes a bucket a new StorageBucket of the same bucket
//     name owns by now;
//   - status and finalizer writes check ownership and carry a resourceVersion
//     precondition.

var (
	shardSlots = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "phalanks_storagebucket_shard_slots",
		Help: "Hash range slots of the StorageBuckets this replica owns (of " + strconv.Itoa(sharding.Slots) + "); all of them without a shard ring.",
	})
	shardHandovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "phalanks_storagebucket_shard_handovers_total",
		Help: "Changes of the owned slots.",
	})
	// cachedCount is the number of StorageBuckets in the informer cache, kept by the
	// informer's event handler: a scrape reads it rather than listing the cache.
	cachedCount   atomic.Int64
	cachedBuckets = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "phalanks_storagebucket_cached",
		Help: "StorageBuckets held in this replica's informer cache: its share with server-side sharding, all of them otherwise.",
	}, func() float64 { return float64(cachedCount.Load()) })
)

func init() { metrics.Registry.MustRegister(shardSlots, shardHandovers, cachedBuckets) }

// countCached keeps cachedCount as the StorageBucket informer adds and deletes.
func countCached(ctx context.Context, mgr ctrl.Manager) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &phalanksv1beta1.StorageBucket{})
	if err != nil {
		return fmt.Errorf("get the StorageBucket informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { cachedCount.Add(1) },
		DeleteFunc: func(any) { cachedCount.Add(-1) },
	})
	if err != nil {
		return fmt.Errorf("count the cached StorageBuckets: %w", err)
	}
	return nil
}

// setupShard joins the ring and returns the channel through which the buckets of
// newly owned slots are reconciled (they start on their probe grid); the buckets of
// slots given up are forgotten. Without a ring the channel stays silent.
func (r *Reconciler) setupShard(mgr ctrl.Manager) (<-chan event.TypedGenericEvent[*phalanksv1beta1.StorageBucket], error) {
	out := make(chan event.TypedGenericEvent[*phalanksv1beta1.StorageBucket], r.opts.Concurrency)
	if err := countCached(context.Background(), mgr); err != nil {
		return nil, err
	}
	m := r.opts.Shard
	if m == nil {
		shardSlots.Set(sharding.Slots)
		return out, nil
	}
	m.WorkContext = workContext(m.Holds)
	if err := mgr.Add(&handover{r: r, to: out}); err != nil {
		return nil, err
	}
	if err := mgr.Add(m); err != nil {
		return nil, err
	}
	return out, nil
}

// workContext makes the context the passes of a slot run under, when the ring member
// takes the slot: its canaries are deleted under the slot's cleanup context, and each
// of its S3 requests is sent only while holds(slot) says the replica still holds the
// slot.
func workContext(holds func(slot int) bool) func(slot int, ctx, cleanup context.Context) context.Context {
	return func(slot int, ctx, cleanup context.Context) context.Context {
		return s3probe.WithGuard(s3probe.WithCleanupContext(ctx, cleanup), func() error {
			if !holds(slot) {
				return errSlotNotHeld
			}
			return nil
		})
	}
}

// errSlotNotHeld stops an S3 request of a pass whose slot this replica gave up, or
// whose ownership lapsed.
var errSlotNotHeld = errors.New("this replica no longer holds the StorageBucket's shard slot")

// begin starts a pass on the StorageBucket with uid, under the context of its slot
// merged with ctx (passContext). It returns false when this replica does not own the
// slot; end(slot) ends a pass that began.
func (r *Reconciler) begin(ctx context.Context, uid types.UID) (context.Context, int, bool) {
	if r.opts.Shard == nil {
		return ctx, 0, true
	}
	slot := sharding.SlotOf(uid)
	base, owned := r.opts.Shard.Begin(slot)
	if !owned {
		return ctx, slot, false
	}
	return passContext{Context: base, req: ctx}, slot, true
}

// end ends a pass that begin started on slot.
func (r *Reconciler) end(slot int) {
	if r.opts.Shard != nil {
		r.opts.Shard.End(slot)
	}
}

// passContext is the context of a pass: it ends with its slot (given up, lapsed, or
// left when the process stops), not with the request's context, and it carries the
// request's values (its logger, its reconcile ID) besides the slot's.
//
// The slot's side is a chain the ring member made from context.Background when it took
// the slot (sharding.Member.WorkContext), so it answers only three lookups: the s3probe
// cleanup context and guard, and the cancelation its contexts register with. Asking it
// first is what makes a context derived from a pass (the probe's timeout) register with
// the slot's cancelation directly, under the slot's lock. A context derived from the
// request's would be registered with the controller's one, which every pass of every
// worker shares, under one lock; and a cancelable context per pass, tied to the slot
// with context.AfterFunc, cost five allocations and a map of children on every probe.
type passContext struct {
	context.Context // the slot's: Deadline, Done, Err, and its values
	req             context.Context
}

// Value looks key up in the slot's context, then in the request's.
func (c passContext) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.req.Value(key)
}

// handover is the Runnable that acts on slot changes: it forgets the buckets of slots
// given up and reconciles those of slots taken, through a channel source. It runs on
// every replica and ends with the manager.
type handover struct {
	r  *Reconciler
	to chan<- event.TypedGenericEvent[*phalanksv1beta1.StorageBucket]
}

// NeedLeaderElection is false: every replica of a ring hands its slots over.
func (h *handover) NeedLeaderElection() bool { return false }

// Start acts on the changes of the ring member's ownership until ctx ends. A slot given
// up and taken again between two looks (its term changed) is both: its passes in
// between found it not owned and forgot its buckets.
func (h *handover) Start(ctx context.Context) error {
	var seen sharding.Ownership
	for {
		cur := h.r.opts.Shard.Ownership()
		var lost, gained sharding.Set
		for slot := range sharding.Slots {
			was, is, retaken := seen.Slots.Has(slot), cur.Slots.Has(slot), seen.Terms[slot] != cur.Terms[slot]
			bit := sharding.Set(1) << uint(slot)
			if was && (!is || retaken) {
				lost |= bit
			}
			if is && (!was || retaken) {
				gained |= bit
			}
		}
		if lost|gained != 0 {
			shardSlots.Set(float64(cur.Slots.Len()))
			shardHandovers.Inc()
		}
		h.r.forgetSlots(lost)
		h.reconcile(ctx, gained)
		seen = cur
		select {
		case <-ctx.Done():
			return nil
		case <-cur.Changed:
		}
	}
}

// reconcile takes over every cached StorageBucket of the slots (those still owned): a
// bucket probed before continues on its grid, or is due now when its last due instant
// may have been missed (resume), straight on the schedule, without a pass of its own;
// the others (never probed, edited since, being deleted) are sent to the controller.
// With server-side sharding the informer gets the buckets of new slots from its watch
// (sharding.Narrowed) as additions, and they reconcile the same way.
func (h *handover) reconcile(ctx context.Context, slots sharding.Set) {
	if slots == 0 {
		return
	}
	list := &phalanksv1beta1.StorageBucketList{}
	if err := h.r.client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	now := h.r.clock.Now()
	for i := range list.Items {
		sb := &list.Items[i]
		if slot := sharding.SlotOf(sb.UID); !slots.Has(slot) || !h.r.opts.Shard.Owns(slot) {
			continue
		}
		if _, scheduled := h.r.sched.Due(sb.UID); scheduled {
			continue
		}
		if resumable(sb) {
			h.r.continueTakenOver(sb, now)
			continue
		}
		select {
		case h.to <- event.TypedGenericEvent[*phalanksv1beta1.StorageBucket]{Object: sb}:
		case <-ctx.Done():
			return
		}
	}
}

// resumable reports whether a StorageBucket this replica takes over continues where
// its previous owner left it: probed at its generation, and not being deleted.
func resumable(sb *phalanksv1beta1.StorageBucket) bool {
	return sb.Status.LastProbeTime != nil && sb.Status.ObservedGeneration == sb.Generation && sb.DeletionTimestamp.IsZero()
}

// continueTakenOver puts a StorageBucket probed before this replica took it over on its
// probe grid instead of probing every bucket at once after a restart or failover,
// unless its last grid instant may have been missed while its shard changed hands:
// then it is due now, and probed after the scheduled probes (resumePriority).
func (r *Reconciler) continueTakenOver(sb *phalanksv1beta1.StorageBucket, now time.Time) {
	interval := sb.Spec.HealthCheck.IntervalDuration()
	next := nextDue(sb.UID, interval, now)
	if r.mayHaveMissed(sb.UID, next.Add(-interval)) {
		r.sched.Resume(refOf(sb), now)
		return
	}
	r.sched.Schedule(refOf(sb), next)
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

// fencedError stops a creating or deleting S3 call: this replica must not change the
// bucket (it lost the slot, or the StorageBucket it acts for is gone, replaced,
// deleted, or could not be confirmed).
type fencedError struct{ why string }

func (e *fencedError) Error() string { return "not changing the bucket: " + e.why }

// current reads sb from the API server (not the cache) and reports whether it still
// exists with the same UID. A pass asks it first when this replica has just taken the
// StorageBucket's slot, before any S3 request: a cache that missed its deletion by
// another replica would otherwise probe its bucket, which a new StorageBucket of the
// same bucket name may own by now.
func (r *Reconciler) current(ctx context.Context, sb *phalanksv1beta1.StorageBucket) (bool, error) {
	switch live, err := r.liveMetadata(ctx, sb); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("confirm the StorageBucket with the API server: %w", err)
	default:
		return live.UID == sb.UID, nil
	}
}

// liveMetadata reads sb's metadata from the API server, not the cache, within
// fenceTimeout.
func (r *Reconciler) liveMetadata(ctx context.Context, sb *phalanksv1beta1.StorageBucket) (*metav1.PartialObjectMetadata, error) {
	ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(phalanksv1beta1.GroupVersion.WithKind("StorageBucket"))
	return live, r.api.Get(ctx, client.ObjectKeyFromObject(sb), live)
}

func fenced(err error) bool {
	var f *fencedError
	return errors.As(err, &f)
}

// fenceTimeout bounds the live read of a fence.
const fenceTimeout = 10 * time.Second

// fence returns the check run before every call that creates, tags, deletes or empties
// the bucket of sb: this replica still owns the bucket's slot, and the API server (not
// the cache) still has sb, with the same UID, being deleted exactly when the call is a
// deletion; and, since that read may take longer than what is left of the ownership,
// the slot is still this replica's once it answered. (Every S3 request, these calls
// included, is guarded besides: see setupShard.)
func (r *Reconciler) fence(sb *phalanksv1beta1.StorageBucket, deleting bool) func(context.Context) error {
	return func(ctx context.Context) error {
		if !r.owns(sb.UID) {
			return &fencedError{"this replica no longer owns the StorageBucket's shard slot"}
		}
		live, err := r.liveMetadata(ctx, sb)
		if err != nil {
			return &fencedError{"could not confirm the StorageBucket with the API server: " + err.Error()}
		}
		switch {
		case !r.owns(sb.UID):
			return &fencedError{"this replica lost the StorageBucket's shard slot while the API server answered"}
		case live.UID != sb.UID:
			return &fencedError{"the StorageBucket was deleted and created again"}
		case deleting && live.DeletionTimestamp.IsZero():
			return &fencedError{"the StorageBucket is not being deleted"}
		case !deleting && !live.DeletionTimestamp.IsZero():
			return &fencedError{"the StorageBucket is being deleted"}
		}
		return nil
	}
}
