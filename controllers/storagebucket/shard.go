package storagebucket

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// Three things keep a replica from acting on a bucket it no longer owns:
//   - every pass runs under a context of its slot that ends when the slot is given up
//     or the ring ownership lapses, and the ring waits for the passes of a slot it
//     gives up to end before it lets another replica take it (sharding.Member.Drain),
//     so two replicas never probe one bucket at once;
//   - every call that creates, tags or deletes a bucket or its objects is preceded by
//     an ownership check and a live read of the StorageBucket from the API server,
//     which must still exist with the same UID and be (or not be) being deleted (the
//     fence): a replica with a stale cache never re-creates a deleted StorageBucket's
//     bucket, nor deletes a re-created one's;
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
	h := &handover{r: r, to: out, wake: make(chan struct{}, 1)}
	r.work = newShardWork(m)
	m.OnChange = func(old, owned sharding.Set) {
		shardSlots.Set(float64(owned.Len()))
		shardHandovers.Inc()
		r.work.changed(old, owned)
		h.note(old, owned)
	}
	m.OnLapse = r.work.lapse
	m.Drain = r.work.drain
	if err := mgr.Add(h); err != nil {
		return nil, err
	}
	if err := mgr.Add(m); err != nil {
		return nil, err
	}
	return out, nil
}

// shardWork gives each pass on a StorageBucket a context of its slot, counts the passes
// running per slot, and waits for those of slots given up to end.
type shardWork struct {
	member *sharding.Member
	mu     sync.Mutex
	slots  [sharding.Slots]slotWork
}

type slotWork struct {
	// ctx ends when the slot is given up or the ownership lapses; cleanup only when
	// the ownership lapses: a canary is still deleted after a pass was stopped
	// (drain waits for it), but never by a replica whose ownership lapsed.
	ctx, cleanup          context.Context
	cancel, cancelCleanup context.CancelFunc
	// pass is ctx with cleanup as its probes' cleanup context: the slot's side of every
	// pass's context (passContext).
	pass    context.Context
	running int
}

func newShardWork(m *sharding.Member) *shardWork {
	w := &shardWork{member: m}
	for i := range w.slots {
		s := &w.slots[i]
		s.ctx, s.cancel = canceled()
		s.cleanup, s.cancelCleanup = context.WithCancel(context.Background())
		s.pass = s3probe.WithCleanupContext(s.ctx, s.cleanup)
	}
	return w
}

func canceled() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx, cancel
}

// changed ends the passes of slots given up and opens the slots taken.
func (w *shardWork) changed(old, owned sharding.Set) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for slot := range sharding.Slots {
		s := &w.slots[slot]
		switch {
		case old.Has(slot) && !owned.Has(slot):
			s.cancel()
		case owned.Has(slot) && !old.Has(slot):
			if s.cleanup.Err() != nil {
				s.cleanup, s.cancelCleanup = context.WithCancel(context.Background())
			}
			s.ctx, s.cancel = context.WithCancel(s.cleanup)
			s.pass = s3probe.WithCleanupContext(s.ctx, s.cleanup)
		}
	}
}

// lapse ends every pass and every cleanup at once: the others may take the slots now.
func (w *shardWork) lapse() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for slot := range sharding.Slots {
		w.slots[slot].cancelCleanup()
	}
}

// begin starts a pass on the StorageBucket with uid, under the context of its slot
// merged with ctx (passContext). It returns false when this replica does not own the
// slot; end(slot) ends a pass that began.
func (w *shardWork) begin(ctx context.Context, uid types.UID) (context.Context, int, bool) {
	if w == nil {
		return ctx, 0, true
	}
	slot := sharding.SlotOf(uid)
	w.mu.Lock()
	s := &w.slots[slot]
	if s.ctx.Err() != nil || !w.member.Owns(slot) {
		w.mu.Unlock()
		return ctx, slot, false
	}
	s.running++
	base := s.pass
	w.mu.Unlock()
	return passContext{Context: base, req: ctx}, slot, true
}

// end ends a pass that begin started on slot.
func (w *shardWork) end(slot int) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.slots[slot].running--
	w.mu.Unlock()
}

// passContext is the context of a pass: it ends with its slot (given up, lapsed, or
// left when the process stops), not with the request's context, and it carries the
// request's values (its logger, its reconcile ID) besides the slot's.
//
// The slot's side is a chain made here from context.Background (slotWork.pass), so it
// answers only two lookups: the s3probe cleanup context, and the cancelation its
// contexts register with. Asking it first is what makes a context derived from a pass
// (the probe's timeout) register with the slot's cancelation directly, under the slot's
// lock. A context derived from the request's would be registered with the controller's
// one, which every pass of every worker shares, under one lock; and a cancelable
// context per pass, tied to the slot with context.AfterFunc, cost five allocations and
// a map of children on every probe.
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

// drainPoll is how often drain looks at the running passes.
const drainPoll = 5 * time.Millisecond

// drain waits until no pass of the slots runs, or ctx ends.
func (w *shardWork) drain(ctx context.Context, slots sharding.Set) error {
	for {
		w.mu.Lock()
		running := 0
		for slot := range sharding.Slots {
			if slots.Has(slot) {
				running += w.slots[slot].running
			}
		}
		w.mu.Unlock()
		if running == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d passes still running: %w", running, ctx.Err())
		case <-time.After(drainPoll):
		}
	}
}

// handover is the Runnable that acts on slot changes: it forgets the buckets of slots
// given up and reconciles those of slots taken, through a channel source. It runs on
// every replica and ends with the manager.
type handover struct {
	r  *Reconciler
	to chan<- event.TypedGenericEvent[*phalanksv1beta1.StorageBucket]

	mu           sync.Mutex
	lost, gained sharding.Set
	wake         chan struct{}
}

// NeedLeaderElection is false: every replica of a ring hands its slots over.
func (h *handover) NeedLeaderElection() bool { return false }

// note records a change; Start acts on it.
func (h *handover) note(old, owned sharding.Set) {
	h.mu.Lock()
	h.lost |= old &^ owned
	h.gained |= owned &^ old
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Start acts on the changes until ctx ends.
func (h *handover) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.wake:
		}
		h.mu.Lock()
		lost, gained := h.lost, h.gained
		h.lost, h.gained = 0, 0
		h.mu.Unlock()
		h.r.forgetSlots(lost)
		h.reconcile(ctx, gained)
	}
}

// reconcile takes over every cached StorageBucket of the slots (those still owned): a
// bucket probed before continues on its grid, or is due now when its last due instant
// may have been missed (resume), straight on the schedule, without a pass of its own;
// the others (never probed, edited since, being deleted) are sent to the controller.
// With server-side sharding the informer also lists again: the buckets of new slots
// arrive as additions, and reconcile the same way.
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

func fenced(err error) bool {
	var f *fencedError
	return errors.As(err, &f)
}

// fenceTimeout bounds the live read of a fence.
const fenceTimeout = 10 * time.Second

// fence returns the check run before every creating or deleting S3 call for sb: this
// replica still owns the bucket's slot, and the API server (not the cache) still has
// sb, with the same UID, being deleted exactly when the call is a deletion.
func (r *Reconciler) fence(sb *phalanksv1beta1.StorageBucket, deleting bool) func(context.Context) error {
	return func(ctx context.Context) error {
		if !r.owns(sb.UID) {
			return &fencedError{"this replica no longer owns the StorageBucket's shard slot"}
		}
		ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
		defer cancel()
		live := &metav1.PartialObjectMetadata{}
		live.SetGroupVersionKind(phalanksv1beta1.GroupVersion.WithKind("StorageBucket"))
		if err := r.api.Get(ctx, client.ObjectKeyFromObject(sb), live); err != nil {
			return &fencedError{"could not confirm the StorageBucket with the API server: " + err.Error()}
		}
		switch {
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
