// Package storagebucket is the StorageBucket controller: it probes each bucket on its
// own schedule (a due-time heap fed to the controller by a leader-only ticker through a
// channel source), records the health in status only when it changes, manages the
// bucket under managementPolicy Manage, and deletes it by policy.
package storagebucket

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	phalanksv1beta1 "github.com/phalanks/phalanks-operator/api/v1beta1"
	"github.com/phalanks/phalanks-operator/internal/s3probe"
)

// Options configure the StorageBucket controller.
type Options struct {
	// Concurrency bounds how many buckets are probed (reconciled) at once.
	Concurrency int
	// Tick is how often the ticker dispatches due buckets.
	Tick time.Duration
	// StatusHeartbeat is how often an unchanged status is still written, to refresh
	// lastProbeTime.
	StatusHeartbeat time.Duration
	// Clock drives the schedule; nil means the real clock.
	Clock clock.WithTicker
}

// Defaults of the flags.
const (
	defaultConcurrency = 32
	defaultTick        = time.Second
	// At a 30s interval a healthy bucket is probed 120 times per hour: one heartbeat
	// write per 120 probes, under 0.01 writes per probe.
	defaultStatusHeartbeat = time.Hour
)

// BindFlags registers the controller's flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Concurrency, "storagebucket-concurrency", defaultConcurrency,
		"How many StorageBuckets are probed at once. Size it to cover the buckets due per second "+
			"times the probe latency; a probe that times out holds its slot for the whole healthCheck.timeout.")
	fs.DurationVar(&o.Tick, "storagebucket-tick", defaultTick,
		"How often the leader dispatches the StorageBuckets that are due (each probe still starts at its own due time).")
	fs.DurationVar(&o.StatusHeartbeat, "storagebucket-status-heartbeat", defaultStatusHeartbeat,
		"How often a StorageBucket status that did not change is still written, to refresh lastProbeTime. "+
			"Changes (conditions, observedGeneration, certificate expiry) are written at once.")
}

func (o *Options) defaults() {
	if o.Concurrency <= 0 {
		o.Concurrency = defaultConcurrency
	}
	if o.Tick <= 0 {
		o.Tick = defaultTick
	}
	if o.StatusHeartbeat <= 0 {
		o.StatusHeartbeat = defaultStatusHeartbeat
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// The controller reads StorageBuckets and writes their status and finalizer; it watches
// the metadata of Secrets and ConfigMaps and reads the referenced ones.
// +kubebuilder:rbac:groups=phalanks.io,resources=storagebuckets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=phalanks.io,resources=storagebuckets/status,verbs=get;patch
// +kubebuilder:rbac:groups=phalanks.io,resources=storagebuckets/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;configmaps,verbs=get;list;watch

// Reconciler reconciles StorageBuckets.
type Reconciler struct {
	client   client.Client
	recorder events.EventRecorder
	clock    clock.WithTicker
	prober   *s3probe.Prober
	sched    *scheduler
	refs     *refReader
	opts     Options

	mu sync.Mutex
	// states holds what this process learned about each bucket; a new leader starts
	// empty and rebuilds it from the next probes.
	states map[types.NamespacedName]*bucketState
	// endpointsDown holds the endpoints whose last probe failed for connectivity.
	endpointsDown map[string]bool
}

// SetupWithManager registers the StorageBucket controller, its field indexes and its
// leader-only ticker with the manager.
func SetupWithManager(mgr ctrl.Manager, o Options) error {
	o.defaults()
	pool := &s3probe.Pool{MaxIdleConnsPerHost: o.Concurrency, Clock: o.Clock}
	r := &Reconciler{
		client:        mgr.GetClient(),
		recorder:      mgr.GetEventRecorder("storagebucket-controller"),
		clock:         o.Clock,
		prober:        &s3probe.Prober{Pool: pool, Clock: o.Clock},
		sched:         newScheduler(),
		refs:          &refReader{cache: mgr.GetClient(), api: mgr.GetAPIReader()},
		opts:          o,
		states:        map[types.NamespacedName]*bucketState{},
		endpointsDown: map[string]bool{},
	}
	if err := setupIndexes(context.Background(), mgr); err != nil {
		return err
	}
	due := make(chan event.TypedGenericEvent[dueBucket], o.Concurrency)
	if err := mgr.Add(&ticker{sched: r.sched, events: due, period: o.Tick, clock: o.Clock,
		onDispatch: func(n int) { dispatchedBuckets.Add(float64(n)); scheduledBuckets.Set(float64(r.sched.Len())) }}); err != nil {
		return fmt.Errorf("add StorageBucket ticker: %w", err)
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("storagebucket").
		For(&phalanksv1beta1.StorageBucket{}, builder.WithPredicates(specOrLifecycleChanged())).
		WatchesMetadata(&corev1.Secret{}, r.referenceChanged("Secret")).
		WatchesMetadata(&corev1.ConfigMap{}, r.referenceChanged("ConfigMap")).
		WatchesRawSource(source.Channel(due, dueHandler(o.Clock))).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.Concurrency}).
		WithLogConstructor(requestLogger(mgr.GetLogger().WithValues("controller", "storagebucket"))).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up StorageBucket controller: %w", err)
	}
	return nil
}

// requestLogger names the StorageBucket in each reconcile's log with one key, where the
// default adds three: a reconcile runs for every probe, thousands per minute.
func requestLogger(base logr.Logger) func(*reconcile.Request) logr.Logger {
	return func(req *reconcile.Request) logr.Logger {
		if req == nil {
			return base
		}
		return base.WithValues("StorageBucket", klog.KRef(req.Namespace, req.Name))
	}
}

// Reconcile probes a StorageBucket when it is due (or its spec or inputs changed),
// manages or deletes its bucket by policy, and writes the status when it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Most passes only read the object, so they read the cache's own copy: every write
	// (patchStatus, the finalizer patches) works on a deep copy of it.
	sb := &phalanksv1beta1.StorageBucket{}
	if err := r.client.Get(ctx, req.NamespacedName, sb, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get StorageBucket: %w", err)
	}
	// Whatever this pass does, the bucket stays on the schedule: the ticker decides
	// when it is looked at next, never the error backoff.
	defer r.sched.Arm(req.NamespacedName)

	if !sb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, sb)
	}
	if added, err := r.reconcileFinalizer(ctx, sb); err != nil || added {
		// The finalizer comes first; its update event starts the next pass.
		return ctrl.Result{}, err
	}
	in, err := r.loadInputs(ctx, sb)
	if err != nil {
		return ctrl.Result{}, err
	}

	now := r.clock.Now()
	st := r.state(req.NamespacedName)
	due, scheduled := r.sched.Due(req.NamespacedName)
	switch cause := decideProbe(sb, st, in.fingerprint, due, scheduled, now); cause {
	case causeNone:
	case causeResume:
		// Probed before this process took over: continue on the bucket's grid instead
		// of probing every bucket at once after a restart or failover.
		r.sched.Schedule(req.NamespacedName, nextDue(sb.UID, sb.Spec.HealthCheck.IntervalDuration(), now))
		return ctrl.Result{}, nil
	default:
		st = r.probe(ctx, sb, in, st, cause, due, now)
	}
	if st == nil {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.writeStatus(ctx, sb, st)
}

// forget drops a deleted StorageBucket from the schedule, the state and the metrics.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.sched.Forget(key)
	r.mu.Lock()
	delete(r.states, key)
	r.mu.Unlock()
	bucketUp.DeleteLabelValues(key.Namespace, key.Name)
	scheduledBuckets.Set(float64(r.sched.Len()))
}
