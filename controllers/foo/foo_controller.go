// Package foo reconciles Foos: each owns one Deployment and keeps its replica count, with
// the behaviour of kubernetes/sample-controller (see docs/foo.md).
package foo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/internal/workers"
)

const (
	// controllerName names the controller in logs and metrics and reports its events.
	controllerName = "foo"
	// eventReporter is the reporting controller of the events this controller records.
	eventReporter = "foo-controller"
	// fieldOwner is the field manager of every write to Deployments and Foo status.
	fieldOwner = client.FieldOwner("phalanks-foo-controller")
)

// Requeue policy, as sample-controller configures its workqueue: a failed Foo is retried
// after 5 ms, doubling per failure up to 1000 s, and all retries together are held to
// 50 per second with bursts of 300.
const (
	retryBaseDelay = 5 * time.Millisecond
	retryMaxDelay  = 1000 * time.Second
	retryQPS       = 50
	retryBurst     = 300
)

// Options configures the Foo controller.
type Options struct {
	// Concurrency is the number of Foos reconciled at once.
	Concurrency int
	// Clock stamps condition transitions; nil means the real clock.
	Clock clock.PassiveClock
}

// BindFlags registers the controller's command-line flags.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.Concurrency, "foo-concurrency", 2,
		fmt.Sprintf("Number of Foos reconciled concurrently (sample-controller runs 2 workers). Changes while the "+
			"operator runs up to %d (or the value at start, if higher).", LiveConcurrencyUpTo))
}

// +kubebuilder:rbac:groups=phalanks.io,resources=foos,verbs=get;list;watch
// +kubebuilder:rbac:groups=phalanks.io,resources=foos/status,verbs=get;patch
// Owner references that block owner deletion need update on the owner's finalizers
// where the OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift).
// +kubebuilder:rbac:groups=phalanks.io,resources=foos/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch

// CacheByObject is the manager cache configuration the Foo controller needs: its
// Deployment watch holds only the Deployments Foos created (they carry LabelOwned), not
// every Deployment in the cluster. Reads of other Deployments by name, to tell a taken
// name from a missing one, go to the API server (see ensureDeployment). The manager
// cache is therefore the wrong place for another controller to read Deployments from;
// scheduled scaling keeps a slim cache of its own.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Label: labels.SelectorFromSet(labels.Set{LabelOwned: labelOwnedValue})},
	}
}

// LiveFlags are the flags whose change Reconfigure applies to a running operator.
var LiveFlags = []string{"foo-concurrency"}

// LiveConcurrencyUpTo is how high --foo-concurrency can rise while the operator runs:
// the workers started.
const LiveConcurrencyUpTo = 64

// Controller is the Foo controller as set up in a manager.
type Controller struct{ concurrency *workers.Limit }

// Reconfigure applies the settings of LiveFlags in o to the running controller: a lower
// concurrency lets the reconciles running finish, a higher one is capped at the workers
// started (LiveConcurrencyUpTo, or the concurrency at start if higher).
func (c *Controller) Reconfigure(o Options) error {
	c.concurrency.Set(o.Concurrency)
	return nil
}

// SetupWithManager registers the Foo controller with the manager. Configure the
// manager's cache with CacheByObject, or its Deployment watch holds every Deployment.
func SetupWithManager(mgr ctrl.Manager, o Options) (*Controller, error) {
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	r := &reconciler{
		client:    mgr.GetClient(),
		apiReader: mgr.GetAPIReader(),
		recorder:  mgr.GetEventRecorder(eventReporter),
		clock:     clk,
	}
	c := &Controller{concurrency: workers.New(o.Concurrency, LiveConcurrencyUpTo)}
	err := ctrl.NewControllerManagedBy(mgr).
		Named(controllerName).
		// Status and metadata writes, this controller's own among them, leave what a Foo
		// asks for unchanged: only a new generation queues it.
		For(&phalanksv1alpha1.Foo{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A Deployment appears because the pass that created it is running; its changes
		// (status included) and its deletion queue its Foo.
		Owns(&appsv1.Deployment{}, builder.WithPredicates(ignoreCreate)).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: c.concurrency.Workers(),
			RateLimiter:             newRateLimiter(),
			// sample-controller's FIFO queue, not controller-runtime's default priority
			// queue (which puts the initial list behind every later event and, by
			// default, has no overall retry bucket).
			UsePriorityQueue: ptr.To(false),
		}).
		Complete(workers.Reconciler(c.concurrency, r))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ignoreCreate drops creation events.
var ignoreCreate = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}

// newRateLimiter returns sample-controller's limiter: the slower of a per-Foo exponential
// backoff and an overall token bucket. It applies only to retries after errors.
func newRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](retryBaseDelay, retryMaxDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(retryQPS), retryBurst)},
	)
}

// reconciler drives a Foo's Deployment to its spec and reports it in the Foo's status.
type reconciler struct {
	client client.Client
	// apiReader reads around the cache, which holds only the Deployments Foos created.
	apiReader client.Reader
	recorder  events.EventRecorder
	clock     clock.PassiveClock
}

// Reconcile makes sure the Foo's Deployment exists, is ours and has the Foo's replicas
// and image, then reports the Deployment in the Foo's status.
//
// Retries follow sample-controller: an API error or a Deployment of that name that the
// Foo does not control returns an error (retried with backoff); an invalid spec is
// recorded and not retried until the Foo changes.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	foo := &phalanksv1alpha1.Foo{}
	if err := r.client.Get(ctx, req.NamespacedName, foo); err != nil {
		// A deleted Foo's Deployment is garbage-collected through its owner reference.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return r.reconcileFoo(ctx, foo)
}

// reconcileFoo runs one pass over a Foo read from the cache: sync the Deployment, write
// the status the pass concluded (once, and only if it changed), then record the events.
func (r *reconciler) reconcileFoo(ctx context.Context, foo *phalanksv1alpha1.Foo) (ctrl.Result, error) {
	obs, passErr := r.sync(ctx, foo)
	if obs.concluded() {
		if err := r.writeStatus(ctx, foo, obs); err != nil {
			// Retried as a whole; the events come with the pass that stores its status.
			return ctrl.Result{}, err
		}
	}
	r.recordEvents(foo, obs)
	return ctrl.Result{}, passErr
}

// sync validates the spec and drives the Deployment to it. It returns what the pass
// observed, and the error the pass ends with: terminal for an invalid spec (retrying
// cannot help; the next edit of the Foo queues it again), a plain one for a name taken
// by another Deployment (sample-controller retries with backoff until it is removed or
// handed over) and for API errors (the observation is then empty).
func (r *reconciler) sync(ctx context.Context, foo *phalanksv1alpha1.Foo) (observation, error) {
	if err := validateSpec(&foo.Spec); err != nil {
		return observation{invalidSpec: err}, reconcile.TerminalError(err)
	}
	dep, err := r.ensureDeployment(ctx, foo)
	var notOwned *notControlledError
	switch {
	case errors.As(err, &notOwned):
		return observation{notControlled: notOwned}, notOwned
	case err != nil:
		return observation{}, err
	}
	return observation{deployment: dep}, nil
}

// recordEvents records what the pass concluded: sample-controller's Synced after a
// successful pass, a Warning for a spec or name it cannot act on.
func (r *reconciler) recordEvents(foo *phalanksv1alpha1.Foo, obs observation) {
	switch {
	case obs.invalidSpec != nil:
		r.recorder.Eventf(foo, nil, corev1.EventTypeWarning, ReasonInvalidSpec, actionSync, "%s", obs.invalidSpec.Error())
	case obs.notControlled != nil:
		r.recorder.Eventf(foo, nil, corev1.EventTypeWarning, ReasonResourceExists, actionSync, MessageResourceExists, obs.notControlled.name)
	case obs.deployment != nil:
		r.recorder.Eventf(foo, nil, corev1.EventTypeNormal, ReasonSynced, actionSync, MessageResourceSynced)
	}
}

// writeStatus computes the status for what the pass observed and writes it when it
// differs from the Foo's, as one merge patch of the whole status block (so zero values
// such as availableReplicas: 0 are stored too).
func (r *reconciler) writeStatus(ctx context.Context, foo *phalanksv1alpha1.Foo, obs observation) error {
	status, changed := computeStatus(foo, obs, r.clock.Now())
	if !changed {
		return nil
	}
	patch, err := statusPatch(status)
	if err != nil {
		return err
	}
	if err := r.client.Status().Patch(ctx, foo, client.RawPatch(types.MergePatchType, patch), fieldOwner); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}
