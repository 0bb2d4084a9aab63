// Package scaling scales Deployments and StatefulSets down outside the working hours
// their annotations (or their Namespace's) give, and back up inside them.
//
// It is level-triggered: each reconcile decides from the current time and the objects
// alone, writes only when the decision differs from what is there, and requeues at the
// next scheduled transition. An operator restart or outage therefore misses nothing.
package scaling

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// FieldManager is the server-side apply field manager of everything the operator
// writes: spec.replicas and its annotations on workloads, spec.minReplicas and its
// annotations on autoscalers.
const FieldManager = "phalanks-scaler"

// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;patch

// Options configure scheduled scaling; the flags set the cluster-wide defaults.
type Options struct {
	// Concurrency is the number of workloads of each kind decided in parallel.
	Concurrency int
	// TimeZone is the zone of schedule elements that name none.
	TimeZone string
	// Weekdays is the week frame of schedule elements that name none, e.g. Mon-Fri.
	Weekdays string
	// GracePeriod protects new workloads from a scale-down right after creation.
	GracePeriod time.Duration
	// DryRun logs decisions and records events but writes nothing.
	DryRun bool
	// Clock decides what time it is and drives the requeue delays; nil is the real
	// clock. Tests inject one they can move.
	Clock clock.WithTicker
}

// BindFlags registers the scheduled-scaling flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Concurrency, "scaling-concurrency", 10,
		"Workloads of each kind (Deployments, StatefulSets) that scheduled scaling decides in parallel.")
	fs.StringVar(&o.TimeZone, "scaling-time-zone", "",
		"IANA time zone for schedule elements that name none (e.g. Europe/Berlin); empty requires every element to name one.")
	fs.StringVar(&o.Weekdays, "scaling-weekdays", "",
		"Week frame for schedule elements that name no weekdays (e.g. Mon-Fri); empty requires every element to name them.")
	fs.DurationVar(&o.GracePeriod, "scaling-grace-period", 15*time.Minute,
		"How long a new workload runs before scheduled scaling may scale it down.")
	fs.BoolVar(&o.DryRun, "scaling-dry-run", false,
		"Log scheduled-scaling decisions and record them as events, but change nothing.")
}

// defaults validates the cluster-wide defaults by parsing elements that need them.
func (o *Options) defaults() (schedule.Defaults, error) {
	d := schedule.Defaults{TimeZone: o.TimeZone, Weekdays: o.Weekdays}
	if o.TimeZone != "" {
		if _, err := schedule.Parse("Mon 00:00-24:00", d); err != nil {
			return d, fmt.Errorf("--scaling-time-zone: %w", err)
		}
	}
	if o.Weekdays != "" {
		if _, err := schedule.Parse("00:00-24:00 UTC", d); err != nil {
			return d, fmt.Errorf("--scaling-weekdays: %w", err)
		}
	}
	return d, nil
}

// SetupWithManager registers one controller for Deployments and one for StatefulSets,
// sharing the decision logic and a slim cache of their own.
func SetupWithManager(mgr ctrl.Manager, o Options) error {
	d, err := o.defaults()
	if err != nil {
		return err
	}
	if o.Concurrency < 1 {
		return errors.New("--scaling-concurrency must be at least 1")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	c, err := newCache(mgr)
	if err != nil {
		return err
	}
	if err := mgr.Add(c); err != nil {
		return fmt.Errorf("add scaling cache: %w", err)
	}
	recorder := mgr.GetEventRecorder(FieldManager)
	for _, k := range kinds {
		r := &reconciler{
			kind: k, reader: c, writer: mgr.GetClient(), recorder: recorder,
			clock: o.Clock, defaults: d, grace: o.GracePeriod, dryRun: o.DryRun,
		}
		if err := r.setup(mgr, c, o); err != nil {
			return err
		}
	}
	return nil
}

// reconciler decides one kind of workload.
type reconciler struct {
	kind     kind
	reader   client.Reader
	writer   client.Client
	recorder events.EventRecorder
	clock    clock.PassiveClock
	defaults schedule.Defaults
	grace    time.Duration
	dryRun   bool
}

func (r *reconciler) setup(mgr ctrl.Manager, c cache.Cache, o Options) error {
	name := "scaling-" + strings.ToLower(r.kind.name)
	err := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: o.Concurrency,
			// Requeues wait on the injected clock, so a test that moves it reaches the
			// next transition without waiting for it.
			NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
				return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{
					Name: name, Clock: o.Clock,
				})
			},
		}).
		WatchesRawSource(source.Kind(c, r.kind.newObject(), &handler.TypedEnqueueRequestForObject[client.Object]{}, workloadPredicate(r.kind, c))).
		WatchesRawSource(source.Kind[client.Object](c, &corev1.Namespace{}, namespaceHandler(r.kind, c), namespacePredicate())).
		WatchesRawSource(source.Kind[client.Object](c, &autoscalingv2.HorizontalPodAutoscaler{}, hpaHandler(r.kind, c), hpaPredicate())).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up %s controller: %w", name, err)
	}
	return nil
}

// Reconcile decides one workload: gather what the decision reads, decide, write what
// differs, report, and requeue at the next transition.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	obj := r.kind.newObject()
	if err := r.reader.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			tracked.forget(r.kind.name, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get %s: %w", r.kind.name, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		tracked.forget(r.kind.name, req.NamespacedName)
		return ctrl.Result{}, nil
	}

	in, err := r.gather(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := decide(in)
	if d.state == stateUnmanaged && d.workload == nil && d.hpa == nil {
		tracked.forget(r.kind.name, req.NamespacedName)
		return ctrl.Result{}, nil
	}

	if r.dryRun {
		if d.workload != nil || d.hpa != nil {
			log.Info("dry run: not writing", "workloadWrite", d.workload != nil, "autoscalerWrite", d.hpa != nil)
		}
	} else {
		if err := r.writeWorkload(ctx, obj, d.workload); err != nil {
			return ctrl.Result{}, err
		}
		if err := r.writeAutoscaler(ctx, obj, d.hpa); err != nil {
			return ctrl.Result{}, err
		}
	}
	countActions(r.kind.name, d.actions, r.dryRun)
	if tracked.observe(r.kind.name, req.NamespacedName, d) {
		r.emit(ctx, obj, d)
	}

	after := requeueAfter(d.requeueAt, in.now)
	log.V(1).Info("decided", "state", d.state, "replicas", in.workload.replicas, "requeueAfter", after)
	return ctrl.Result{RequeueAfter: after}, nil
}
