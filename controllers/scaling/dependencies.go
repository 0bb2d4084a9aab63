package scaling

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// A restore may wait for other workloads of its namespace (AnnotationWakeAfter): the
// services that need a database come back once the database is Ready. Its wait starts
// when its restore falls due and lasts at most its timeout, after which it is restored
// anyway with a Warning. A workload some waiting restore depends on goes before every
// other restore under --scaling-restore-rate.

// Event reasons of restores that wait for other workloads.
const (
	// ReasonWaitingForDependency: the restore is due and waits for the workloads
	// wake-after names to be Ready.
	ReasonWaitingForDependency = "WaitingForDependency"
	// ReasonDependencyTimeout: a workload wake-after names was not Ready within the
	// timeout, and the restore went ahead without it.
	ReasonDependencyTimeout = "DependencyTimeout"
	// ReasonDependencyMissing: a workload wake-after names does not exist or is of a
	// kind the operator does not watch, and the restore went ahead without it.
	ReasonDependencyMissing = "DependencyMissing"
)

var restoresWaitingOnDependency = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "phalanks_scaling_restores_waiting_on_dependency",
	Help: "Restores due that wait for the workloads their phalanks.io/wake-after names to be Ready.",
})

func init() { metrics.Registry.MustRegister(restoresWaitingOnDependency) }

// Dependency is a workload of the same namespace that a restore waits for.
type Dependency struct {
	// Kind is Deployment or StatefulSet.
	Kind string
	Name string
}

func (d Dependency) String() string { return d.Kind + "/" + d.Name }

// dependencyKinds are the kinds wake-after can name, by the names kubectl takes.
var dependencyKinds = map[string]*kind{
	"deployment": deployments, "deployments": deployments, "deploy": deployments,
	"statefulset": statefulSets, "statefulsets": statefulSets, "sts": statefulSets,
}

// MaxWakeAfter bounds the workloads one wake-after names.
const MaxWakeAfter = 16

// DefaultWakeAfterTimeout is how long a restore waits for its dependencies unless
// AnnotationWakeAfterTimeout says otherwise; MaxWakeAfterTimeout bounds that.
const (
	DefaultWakeAfterTimeout = 10 * time.Minute
	MaxWakeAfterTimeout     = 12 * time.Hour
)

// dependencyPoll is how often a waiting restore looks at its dependencies again
// besides when one of them changes: a safety net, not the way it learns.
const dependencyPoll = 30 * time.Second

// WakeAfter parses AnnotationWakeAfter: comma-separated <kind>/<name> of workloads in
// the same namespace, the kind a Deployment or StatefulSet as kubectl names it
// (deployment, deploy, statefulset, sts...).
func WakeAfter(v string) ([]Dependency, error) {
	var out []Dependency
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		kindName, name, ok := strings.Cut(item, "/")
		k := dependencyKinds[strings.ToLower(kindName)]
		switch {
		case item == "":
			return nil, fmt.Errorf("%s has an empty entry; write <kind>/<name>[, <kind>/<name>...]", strconv.Quote(v))
		case !ok || strings.Contains(name, "/"):
			return nil, fmt.Errorf("%s is not <kind>/<name> of a workload in the same namespace, such as statefulset/db", strconv.Quote(item))
		case k == nil:
			return nil, fmt.Errorf("%s: the kind %s is not deployment or statefulset", strconv.Quote(item), strconv.Quote(kindName))
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			return nil, fmt.Errorf("%s: %s is not a valid name", strconv.Quote(item), strconv.Quote(name))
		}
		out = append(out, Dependency{Kind: k.name, Name: name})
	}
	if len(out) > MaxWakeAfter {
		return nil, fmt.Errorf("names %d workloads (at most %d)", len(out), MaxWakeAfter)
	}
	return out, nil
}

// WakeAfterTimeout parses AnnotationWakeAfterTimeout: a duration such as 10m, or whole
// seconds, more than 0 and at most 12h.
func WakeAfterTimeout(v string) (time.Duration, error) {
	d, err := gracePeriod(v)
	switch {
	case err != nil:
		return 0, err
	case d <= 0:
		return 0, fmt.Errorf("%s must be longer than 0", strconv.Quote(strings.TrimSpace(v)))
	case d > MaxWakeAfterTimeout:
		return 0, fmt.Errorf("%s is longer than 12h", strconv.Quote(strings.TrimSpace(v)))
	}
	return d, nil
}

// dependencyReady reports whether a Deployment or StatefulSet, as the scaling cache holds
// it, is Ready: its controller has seen its latest spec, and as many replicas as it asks
// for are available (ready for minReadySeconds). Else it says why not.
func dependencyReady(obj client.Object) (bool, string) {
	var want, available int32
	var observedGen int64
	switch o := obj.(type) {
	case *appsv1.Deployment:
		want, available, observedGen = ptr.Deref(o.Spec.Replicas, 1), o.Status.AvailableReplicas, o.Status.ObservedGeneration
	case *appsv1.StatefulSet:
		want, available, observedGen = ptr.Deref(o.Spec.Replicas, 1), o.Status.AvailableReplicas, o.Status.ObservedGeneration
	default:
		return false, "not a Deployment or StatefulSet"
	}
	switch {
	case want == 0:
		return false, "it is scaled to 0"
	case observedGen < obj.GetGeneration():
		return false, "its controller has not acted on its latest change yet"
	case available < want:
		return false, fmt.Sprintf("%d of %d replicas available", available, want)
	}
	return true, ""
}

// dependencyKey names a workload restores wait for.
type dependencyKey struct {
	kind            string
	namespace, name string
}

// waiterKey names a waiting restore: its kind's name and the object.
type waiterKey struct {
	kind string
	obj  types.NamespacedName
}

// waitingRestore is a restore that waits for its dependencies.
type waitingRestore struct {
	since time.Time
	on    []dependencyKey
	// passed: it waits no more (they were Ready, or the timeout ran out), with these
	// events to report with the restore.
	passed bool
	events []eventSpec
}

// dependencies keeps the restores that wait for other workloads, so that a dependency
// that becomes Ready wakes them, and a dependency some restore waits for goes first.
// A restore stays here from its first wait until it is written or called off. Safe for
// concurrent use.
type dependencies struct {
	mu      sync.Mutex
	waiting map[waiterKey]*waitingRestore
	// byDependency are the restores that wait for each dependency.
	byDependency map[dependencyKey]map[waiterKey]struct{}
}

func newDependencies() *dependencies {
	return &dependencies{waiting: map[waiterKey]*waitingRestore{}, byDependency: map[dependencyKey]map[waiterKey]struct{}{}}
}

// passed returns the events of w's wait if it has ended.
func (ds *dependencies) passed(w waiterKey) ([]eventSpec, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if wr, ok := ds.waiting[w]; ok && wr.passed {
		return wr.events, true
	}
	return nil, false
}

// hold records that w waits for on from now (or since it first did), and returns since
// when, and whether it did not wait before.
func (ds *dependencies) hold(w waiterKey, on []dependencyKey, now time.Time) (since time.Time, first bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	wr, waited := ds.waiting[w]
	if !waited {
		wr = &waitingRestore{since: now}
		ds.waiting[w] = wr
	}
	ds.unlink(w, wr)
	wr.on = on
	for _, d := range on {
		if ds.byDependency[d] == nil {
			ds.byDependency[d] = map[waiterKey]struct{}{}
		}
		ds.byDependency[d][w] = struct{}{}
	}
	ds.count()
	return wr.since, !waited
}

// pass ends w's wait; the restore reports events when it is written.
func (ds *dependencies) pass(w waiterKey, events []eventSpec) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	wr, ok := ds.waiting[w]
	if !ok {
		return
	}
	ds.unlink(w, wr)
	wr.passed, wr.events = true, events
	ds.count()
}

// release forgets w: its restore was written, or called off.
func (ds *dependencies) release(w waiterKey) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if wr, ok := ds.waiting[w]; ok {
		ds.unlink(w, wr)
		delete(ds.waiting, w)
		ds.count()
	}
}

func (ds *dependencies) unlink(w waiterKey, wr *waitingRestore) {
	for _, d := range wr.on {
		delete(ds.byDependency[d], w)
		if len(ds.byDependency[d]) == 0 {
			delete(ds.byDependency, d)
		}
	}
	wr.on = nil
}

// count sets the gauge of the restores that wait.
func (ds *dependencies) count() {
	n := 0
	for _, wr := range ds.waiting {
		if !wr.passed {
			n++
		}
	}
	restoresWaitingOnDependency.Set(float64(n))
}

// wanted reports whether a waiting restore waits for d.
func (ds *dependencies) wanted(d dependencyKey) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return len(ds.byDependency[d]) > 0
}

// waitersOf returns the requests of the restores of kind that wait for d.
func (ds *dependencies) waitersOf(kindName string, d dependencyKey) []reconcile.Request {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	var out []reconcile.Request
	for w := range ds.byDependency[d] {
		if w.kind == kindName {
			out = append(out, reconcile.Request{NamespacedName: w.obj})
		}
	}
	return out
}

// restoreRank is the rank of a restore under --scaling-restore-rate: its priority, and
// above every priority when a waiting restore depends on it.
func restoreRank(priority int, wanted bool) int {
	if wanted {
		return priority + 2*MaxRestorePriority + 1
	}
	return priority
}

// dependencyHandler wakes the restores of kind k that wait for a dependency of kind dk
// when it becomes Ready.
func (s *scaler) dependencyHandler(k, dk *kind) (handler.TypedEventHandler[client.Object, reconcile.Request], predicate.TypedPredicate[client.Object]) {
	h := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return s.deps.waitersOf(k.name, dependencyKey{kind: dk.name, namespace: o.GetNamespace(), name: o.GetName()})
	})
	ready := func(o client.Object) bool { r, _ := dependencyReady(o); return r }
	p := predicate.TypedFuncs[client.Object]{
		CreateFunc:  func(e event.TypedCreateEvent[client.Object]) bool { return ready(e.Object) },
		UpdateFunc:  func(e event.TypedUpdateEvent[client.Object]) bool { return ready(e.ObjectNew) && !ready(e.ObjectOld) },
		DeleteFunc:  func(event.TypedDeleteEvent[client.Object]) bool { return true },
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	}
	return h, p
}

// watchesDependencies reports whether the scaling cache holds dk's objects.
func (s *scaler) watchesDependencies(dk *kind) bool {
	return slices.Contains(s.opts.Resources, dk.resource)
}

// awaitDependencies decides whether a restore due now waits for the workloads its
// wake-after names: it returns when to look again if it waits, else the Warning events
// to report with the restore (a dependency missing, or not Ready in time). Once it has
// stopped waiting it does not wait again until the restore is written or called off.
func (r *reconciler) awaitDependencies(ctx context.Context, obj client.Object, d decision, now time.Time) (time.Time, []eventSpec, error) {
	if len(d.wakeAfter) == 0 {
		return time.Time{}, nil, nil
	}
	w := r.waiterKey(obj)
	if events, ok := r.s.deps.passed(w); ok {
		return time.Time{}, events, nil
	}
	var on []dependencyKey
	var missing []string
	for _, dep := range d.wakeAfter {
		if dep.Kind == r.kind.name && dep.Name == obj.GetName() {
			continue // a Namespace's wake-after reaches the workload it names, too
		}
		dk := dependencyKinds[strings.ToLower(dep.Kind)]
		if !r.s.watchesDependencies(dk) {
			missing = append(missing, dep.String()+" (--scaling-resources does not include "+dk.resource+")")
			continue
		}
		on = append(on, dependencyKey{kind: dk.name, namespace: obj.GetNamespace(), name: dep.Name})
	}
	if len(on) == 0 {
		return time.Time{}, missingEvents(missing), nil
	}
	// Recorded before the dependencies are read, so that one that becomes Ready after
	// the read wakes this restore.
	since, first := r.s.deps.hold(w, on, now)
	var notReady []string
	for _, key := range on {
		dep := dependencyKinds[strings.ToLower(key.kind)].newObject()
		if err := r.s.cache.Get(ctx, types.NamespacedName{Namespace: key.namespace, Name: key.name}, dep); err != nil {
			if apierrors.IsNotFound(err) {
				missing = append(missing, key.kind+"/"+key.name+" (it does not exist)")
				continue
			}
			return time.Time{}, nil, fmt.Errorf("read %s %s: %w", key.kind, key.name, err)
		}
		if ok, why := dependencyReady(dep); !ok {
			notReady = append(notReady, key.kind+"/"+key.name+": "+why)
		}
	}
	deadline := since.Add(d.wakeAfterTimeout)
	if len(notReady) > 0 && now.Before(deadline) {
		if first {
			note := fmt.Sprintf("restore waits until %s Ready (at most %s, until %s): %s",
				waitedFor(len(on)), d.wakeAfterTimeout, stamp(deadline), strings.Join(notReady, "; "))
			r.s.recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonWaitingForDependency, "Wait", "%s", truncate(note, maxNote))
			ctrl.LoggerFrom(ctx).Info(note, "reason", ReasonWaitingForDependency)
		}
		return earliest(deadline, now.Add(dependencyPoll)), nil, nil
	}
	events := missingEvents(missing)
	if len(notReady) > 0 {
		events = append(events, eventSpec{warning: true, reason: ReasonDependencyTimeout, action: "Scale", note: fmt.Sprintf(
			"restored after waiting %s without what wake-after names being Ready: %s", now.Sub(since).Round(time.Second), strings.Join(notReady, "; "))})
	}
	r.s.deps.pass(w, events)
	return time.Time{}, events, nil
}

// waiterKey names obj's restore among those that wait.
func (r *reconciler) waiterKey(obj client.Object) waiterKey {
	return waiterKey{kind: r.kind.name, obj: client.ObjectKeyFromObject(obj)}
}

// waitedFor names the waited-for workloads in the waiting note.
func waitedFor(n int) string {
	if n == 1 {
		return "the workload wake-after names is"
	}
	return fmt.Sprintf("the %d workloads wake-after names are", n)
}

func missingEvents(missing []string) []eventSpec {
	if len(missing) == 0 {
		return nil
	}
	return []eventSpec{{warning: true, reason: ReasonDependencyMissing, action: "Scale",
		note: "restored without waiting for " + strings.Join(missing, ", ")}}
}
