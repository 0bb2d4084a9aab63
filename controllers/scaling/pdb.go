package scaling

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// A PodDisruptionBudget of a scaled-down workload would keep blocking node drains
// (with downtime-replicas above 0) and alerting for pods that are not meant to run. It
// is relaxed while every Deployment and StatefulSet whose pods it selects is scaled down
// by the operator, and restored exactly when any of them comes back: it follows its
// workloads, with no schedule of its own to keep in step.
const (
	// AnnotationOriginalMinAvailable is written by the operator on a relaxed
	// PodDisruptionBudget: its minAvailable to restore.
	AnnotationOriginalMinAvailable = annotationPrefix + "original-min-available"
	// AnnotationOriginalMaxUnavailable is written by the operator on a relaxed
	// PodDisruptionBudget: its maxUnavailable to restore.
	AnnotationOriginalMaxUnavailable = annotationPrefix + "original-max-unavailable"
)

// Relaxed values: every pod the budget selects may be evicted.
var (
	relaxedMinAvailable   = intstr.FromInt32(0)
	relaxedMaxUnavailable = intstr.FromString("100%")
)

const pdbKindName = "PodDisruptionBudget"

// pdbCovered are the kinds whose pod templates a PodDisruptionBudget is matched against.
var pdbCovered = []*kind{deployments, statefulSets}

// pdbView is what a decision needs to know about a PodDisruptionBudget.
type pdbView struct {
	minAvailable, maxUnavailable *intstr.IntOrString
	annotations                  map[string]string
	controller                   *metav1.OwnerReference
}

// coveredWorkload is a workload whose pods a PodDisruptionBudget selects.
type coveredWorkload struct {
	kind, name  string
	level       int32
	annotations map[string]string
}

// scaledDown reports whether the operator holds the workload below its saved count.
func (w coveredWorkload) scaledDown() bool {
	saved, ok, err := savedCount(w.annotations, AnnotationOriginalReplicas)
	return ok && err == nil && w.level < saved
}

// pdbInputs is everything a PodDisruptionBudget's decision is made from.
type pdbInputs struct {
	pdb      pdbView
	covered  []coveredWorkload
	excluded bool
	dryRun   bool
}

// pdbWrite is the operator's part of a PodDisruptionBudget.
type pdbWrite struct {
	minAvailable, maxUnavailable *intstr.IntOrString
	original                     map[string]string
	next                         string
}

func (w *pdbWrite) annotationsFor() map[string]string {
	a := maps.Clone(w.original)
	if a == nil {
		a = map[string]string{}
	}
	if w.next != "" {
		a[AnnotationNextTransition] = w.next
	}
	return a
}

// decidePDB relaxes a PodDisruptionBudget whose workloads are all scaled down and
// restores one that is relaxed when they are not (or it is excluded).
func decidePDB(in pdbInputs) (state, *pdbWrite, []eventSpec) {
	p := in.pdb
	origMin, relaxedMin := p.annotations[AnnotationOriginalMinAvailable]
	origMax, relaxedMax := p.annotations[AnnotationOriginalMaxUnavailable]
	relaxed := relaxedMin || relaxedMax
	var names []string
	down := len(in.covered) > 0
	next := ""
	for _, w := range in.covered {
		names = append(names, w.kind+" "+w.name)
		if !w.scaledDown() {
			down = false
			continue
		}
		if n := w.annotations[AnnotationNextTransition]; n != "" && (next == "" || n < next) {
			next = n
		}
	}
	slices.Sort(names)
	what := strings.Join(names, ", ")
	if p.controller != nil {
		if !relaxed && !down {
			return stateUnmanaged, nil, nil
		}
		return stateOwned, nil, []eventSpec{{reason: ReasonControlledByOwner, action: "Skip", note: fmt.Sprintf(
			"not relaxed: controlled by %s %s, which sets it", p.controller.Kind, p.controller.Name)}}
	}
	switch {
	case relaxed && (!down || in.excluded):
		w := &pdbWrite{}
		note := "restored "
		if relaxedMin {
			v := intstr.Parse(origMin)
			w.minAvailable, note = &v, note+"minAvailable "+origMin
		} else {
			v := intstr.Parse(origMax)
			w.maxUnavailable, note = &v, note+"maxUnavailable "+origMax
		}
		why := "the workloads whose pods it selects are no longer all scaled down"
		if in.excluded {
			why = "excluded from scheduled scaling"
		}
		return stateUp, w, []eventSpec{{reason: ReasonScaleUp, action: "Scale", note: note + ": " + why}}
	case relaxed:
		if p.annotations[AnnotationNextTransition] != next {
			// The workloads' schedule changed: keep the record current.
			w := &pdbWrite{minAvailable: p.minAvailable, maxUnavailable: p.maxUnavailable, next: next,
				original: keepAnnotations(p.annotations, AnnotationOriginalMinAvailable, AnnotationOriginalMaxUnavailable)}
			return stateDown, w, nil
		}
		return stateDown, nil, nil
	case !down || in.excluded:
		if len(in.covered) == 0 {
			return stateUnmanaged, nil, nil
		}
		return stateUp, nil, nil
	}
	w := &pdbWrite{next: next}
	var note string
	switch {
	case p.minAvailable != nil && !equality.Semantic.DeepEqual(*p.minAvailable, relaxedMinAvailable):
		w.minAvailable = &relaxedMinAvailable
		w.original = map[string]string{AnnotationOriginalMinAvailable: p.minAvailable.String()}
		note = fmt.Sprintf("relaxed minAvailable from %s to 0", p.minAvailable.String())
	case p.maxUnavailable != nil && !equality.Semantic.DeepEqual(*p.maxUnavailable, relaxedMaxUnavailable):
		w.maxUnavailable = &relaxedMaxUnavailable
		w.original = map[string]string{AnnotationOriginalMaxUnavailable: p.maxUnavailable.String()}
		note = fmt.Sprintf("relaxed maxUnavailable from %s to 100%%", p.maxUnavailable.String())
	default:
		// Blocks nothing already.
		return stateDown, nil, nil
	}
	return stateDown, w, []eventSpec{{reason: ReasonScaleDown, action: "Scale", note: fmt.Sprintf(
		"%s while %s %s scaled down, so it blocks no node drain; restored when they come back", note, what, isAre(len(names)))}}
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// slimPDB keeps what decisions read of PodDisruptionBudgets.
func slimPDB(obj any) (any, error) {
	p, ok := obj.(*policyv1.PodDisruptionBudget)
	if !ok {
		return obj, nil
	}
	return &policyv1.PodDisruptionBudget{ObjectMeta: slimMeta(p.ObjectMeta), Spec: policyv1.PodDisruptionBudgetSpec{
		Selector: p.Spec.Selector, MinAvailable: p.Spec.MinAvailable, MaxUnavailable: p.Spec.MaxUnavailable,
	}}, nil
}

// pdbReconciler decides PodDisruptionBudgets.
type pdbReconciler struct {
	s *scaler
	// covered are the kinds scaled whose pods budgets are matched against.
	covered []*kind
}

func (s *scaler) setupPDB() error {
	r := &pdbReconciler{s: s}
	for _, k := range pdbCovered {
		if slices.Contains(s.opts.Resources, k.resource) {
			r.covered = append(r.covered, k)
		}
	}
	b := ctrl.NewControllerManagedBy(s.mgr).
		Named("scaling-poddisruptionbudget").
		WithOptions(controller.Options{MaxConcurrentReconciles: s.opts.Concurrency}).
		WatchesRawSource(source.Kind[client.Object](s.cache, &policyv1.PodDisruptionBudget{},
			&handler.TypedEnqueueRequestForObject[client.Object]{}, pdbPredicate()))
	for _, k := range r.covered {
		b = b.WatchesRawSource(source.Kind(s.cache, k.newObject(), r.budgetsOf(), coveredPredicate()))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("set up scaling-poddisruptionbudget controller: %w", err)
	}
	registerKind(pdbKindName)
	return nil
}

// Reconcile decides one PodDisruptionBudget.
func (r *pdbReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pdb := &policyv1.PodDisruptionBudget{}
	if err := r.s.cache.Get(ctx, req.NamespacedName, pdb); err != nil {
		if apierrors.IsNotFound(err) {
			tracked.forget(pdbKindName, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get PodDisruptionBudget: %w", err)
	}
	if !pdb.DeletionTimestamp.IsZero() {
		tracked.forget(pdbKindName, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	in, err := r.gather(ctx, pdb)
	if err != nil {
		return ctrl.Result{}, err
	}
	st, w, events := decidePDB(in)
	d := decision{state: st, events: events, dryRun: in.dryRun}
	if st == stateUnmanaged {
		tracked.forget(pdbKindName, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if w != nil && !in.dryRun {
		if err := r.write(ctx, pdb, w); err != nil {
			return ctrl.Result{}, err
		}
	}
	if tracked.observe(pdbKindName, req.NamespacedName, d) {
		r.s.emit(ctx, pdb, d)
	}
	return ctrl.Result{}, nil
}

// gather reads the budget's workloads: those of the covered kinds in its namespace whose
// pod template labels its selector matches.
func (r *pdbReconciler) gather(ctx context.Context, pdb *policyv1.PodDisruptionBudget) (pdbInputs, error) {
	ns := &corev1.Namespace{}
	if err := r.s.cache.Get(ctx, types.NamespacedName{Name: pdb.Namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
		return pdbInputs{}, fmt.Errorf("get namespace: %w", err)
	}
	in := pdbInputs{
		pdb: pdbView{minAvailable: pdb.Spec.MinAvailable, maxUnavailable: pdb.Spec.MaxUnavailable,
			annotations: pdb.Annotations, controller: metav1.GetControllerOf(pdb)},
		excluded: r.s.policy.excluded(ns.Name, ns.Labels),
		dryRun:   r.s.policy.dryRun,
	}
	// The budget's own exclude and dry-run annotations (or its namespace's) apply to it.
	cfg, err := resolve([]layer{{annotations: pdb.Annotations}, {source: "namespace " + pdb.Namespace, annotations: ns.Annotations}},
		r.s.policy.scheduleDefaults, true)
	if err == nil {
		in.excluded = in.excluded || cfg.excluded(r.s.opts.Clock.Now())
		in.dryRun = in.dryRun || cfg.dryRun
	}
	if pdb.Spec.Selector == nil {
		return in, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return in, nil //nolint:nilerr // a selector the API server accepted but we cannot read selects nothing here
	}
	for _, k := range r.covered {
		list := k.newList()
		if err := r.s.cache.List(ctx, list, client.InNamespace(pdb.Namespace)); err != nil {
			return pdbInputs{}, fmt.Errorf("list %ss: %w", k.name, err)
		}
		for _, o := range workloadsOf(list) {
			if !sel.Matches(labels.Set(templateLabels(o))) {
				continue
			}
			level, _ := k.read(ctx, nil, o)
			in.covered = append(in.covered, coveredWorkload{kind: k.name, name: o.GetName(), level: level, annotations: o.GetAnnotations()})
		}
	}
	return in, nil
}

func workloadsOf(list client.ObjectList) []client.Object {
	var out []client.Object
	switch l := list.(type) {
	case *appsv1.DeploymentList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.StatefulSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

func templateLabels(o client.Object) map[string]string {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return w.Spec.Template.Labels
	case *appsv1.StatefulSet:
		return w.Spec.Template.Labels
	}
	return nil
}

// write applies the operator's part of a PodDisruptionBudget: the field it relaxes (kept
// in every later apply, as with replicas) and its annotations.
func (r *pdbReconciler) write(ctx context.Context, pdb *policyv1.PodDisruptionBudget, w *pdbWrite) error {
	spec := policyv1ac.PodDisruptionBudgetSpec()
	if w.minAvailable != nil {
		spec.WithMinAvailable(*w.minAvailable)
	}
	if w.maxUnavailable != nil {
		spec.WithMaxUnavailable(*w.maxUnavailable)
	}
	ac := policyv1ac.PodDisruptionBudget(pdb.Name, pdb.Namespace).
		WithUID(pdb.UID).WithResourceVersion(pdb.ResourceVersion).
		WithAnnotations(w.annotationsFor()).WithSpec(spec)
	return apply(ctx, r.s.mgr.GetClient(), "PodDisruptionBudget", ac)
}

// budgetsOf maps a workload to the PodDisruptionBudgets in its namespace that select
// its pods.
func (r *pdbReconciler) budgetsOf() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &policyv1.PodDisruptionBudgetList{}
		if err := r.s.cache.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			p := &list.Items[i]
			if p.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err == nil && sel.Matches(labels.Set(templateLabels(o))) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			}
		}
		return reqs
	})
}

// pdbPredicate passes budget changes that matter: not status updates.
func pdbPredicate() predicate.TypedFuncs[client.Object] {
	return predicate.TypedFuncs[client.Object]{
		UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
			return !maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()) ||
				e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
				!equality.Semantic.DeepEqual(e.ObjectOld.GetOwnerReferences(), e.ObjectNew.GetOwnerReferences())
		},
	}
}

// coveredPredicate passes workload changes that can change whether they are scaled down.
func coveredPredicate() predicate.TypedFuncs[client.Object] {
	return predicate.TypedFuncs[client.Object]{
		CreateFunc: func(e event.TypedCreateEvent[client.Object]) bool { return inScope(e.Object.GetAnnotations()) },
		UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
			return !maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()) ||
				e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration()
		},
	}
}
