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
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/phalanks/phalanks-operator/internal/intern"
	"github.com/phalanks/phalanks-operator/internal/workers"
)

// A PodDisruptionBudget of a scaled-down workload would keep blocking node drains
// (with downtime-replicas above 0) and alerting for pods that are not meant to run. It
// is relaxed while every Deployment and StatefulSet whose pod template it selects is
// scaled down by the operator and every pod it selects right now belongs (through its
// controllers: Pod → ReplicaSet → Deployment, Pod → StatefulSet) to one of them, and it
// is restored exactly when either stops being true: it follows its workloads, with no
// schedule of its own to keep in step.
//
// The pods decide, not the workloads' annotations: anyone who may create a Deployment
// can write original-replicas on it and give it the labels of someone else's pods, so a
// budget that protects pods of anything else (a StatefulSet without a schedule, an Argo
// Rollout, a bare ReplicaSet, an operator's pods) is never relaxed. Before relaxing a
// budget the operator reads the pods and their owners again from the API server, not
// from its cache.
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

// coveredWorkload is a workload whose pod template a PodDisruptionBudget selects.
type coveredWorkload struct {
	kind, name  string
	uid         types.UID
	level       int32
	annotations map[string]string
}

// scaledDown reports whether the operator holds the workload below its saved count.
func (w coveredWorkload) scaledDown() bool {
	saved, ok, err := savedCount(w.annotations, AnnotationOriginalReplicas)
	return ok && err == nil && w.level < saved
}

// coveredWorkload identifies it among the owners of pods.
func (w coveredWorkload) is(o podOwner) bool {
	return o.kind == w.kind && o.name == w.name && o.uid == w.uid
}

// podOwner is the workload a pod belongs to, found by following controller references:
// a Deployment for a pod of one of its ReplicaSets, else the pod's own controller; kind
// "" for a pod without one.
type podOwner struct {
	kind, name string
	uid        types.UID
}

func (o podOwner) String() string {
	if o.kind == "" {
		return "no controller"
	}
	return o.kind + " " + o.name
}

// selectedPod is a pod a PodDisruptionBudget selects that has not finished.
type selectedPod struct {
	name  string
	owner podOwner
}

// pdbInputs is everything a PodDisruptionBudget's decision is made from.
type pdbInputs struct {
	pdb     pdbView
	covered []coveredWorkload
	// pods are the pods the budget selects that have not finished, with their owners.
	pods     []selectedPod
	excluded bool
	dryRun   bool
}

// otherPods returns the pods the budget selects that belong to nothing the operator
// holds scaled down, described by owner ("ReplicaSet db (db-7c9f4-x2x)"), sorted.
func (in pdbInputs) otherPods() []string {
	var out []string
	for _, p := range in.pods {
		i := slices.IndexFunc(in.covered, func(w coveredWorkload) bool { return w.is(p.owner) })
		if i < 0 || !in.covered[i].scaledDown() {
			out = append(out, fmt.Sprintf("%s (%s)", p.owner, p.name))
		}
	}
	slices.Sort(out)
	return out
}

// pdbWrite is the operator's part of a PodDisruptionBudget.
type pdbWrite struct {
	minAvailable, maxUnavailable *intstr.IntOrString
	original                     map[string]string
	next                         string
	// relax: the write relaxes the budget (rather than restore it or keep its record).
	relax bool
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

// decidePDB relaxes a PodDisruptionBudget whose workloads are all scaled down and whose
// pods all belong to them, and restores one that is relaxed as soon as either stops
// being true (or it is excluded).
func decidePDB(in pdbInputs) (state, *pdbWrite, []eventSpec) {
	p := in.pdb
	origMin, relaxedMin := p.annotations[AnnotationOriginalMinAvailable]
	origMax, relaxedMax := p.annotations[AnnotationOriginalMaxUnavailable]
	relaxed := relaxedMin || relaxedMax
	var downNames, upNames []string
	next := ""
	for _, w := range in.covered {
		if !w.scaledDown() {
			upNames = append(upNames, w.kind+" "+w.name)
			continue
		}
		downNames = append(downNames, w.kind+" "+w.name)
		if n := w.annotations[AnnotationNextTransition]; n != "" && (next == "" || n < next) {
			next = n
		}
	}
	slices.Sort(downNames)
	slices.Sort(upNames)
	others := in.otherPods()
	// What keeps the budget although some of its workloads are scaled down.
	var blockers []string
	if len(upNames) > 0 {
		blockers = append(blockers, strings.Join(upNames, ", ")+" "+isAre(len(upNames))+" not")
	}
	if len(others) > 0 {
		blockers = append(blockers, "it also protects pods the operator did not scale down: "+strings.Join(others, ", "))
	}
	if p.controller != nil {
		if !relaxed && len(downNames) == 0 {
			return stateUnmanaged, nil, nil
		}
		return stateOwned, nil, []eventSpec{{reason: ReasonControlledByOwner, action: "Skip", note: fmt.Sprintf(
			"not relaxed: controlled by %s %s, which sets it", p.controller.Kind, p.controller.Name)}}
	}
	// switched: someone made the budget use the other field during the downtime (the API
	// server allows only one); the operator's relaxed field is gone with it, and the
	// switch is theirs to keep.
	switched := relaxedMin && p.minAvailable == nil && p.maxUnavailable != nil ||
		relaxedMax && p.maxUnavailable == nil && p.minAvailable != nil
	switch {
	case relaxed && (len(blockers) > 0 || len(downNames) == 0 || in.excluded):
		w := &pdbWrite{}
		var note string
		switch {
		case switched && relaxedMin:
			note = "kept maxUnavailable " + p.maxUnavailable.String() + ", to which it was switched during the downtime (minAvailable " + origMin + " is not restored)"
		case switched:
			note = "kept minAvailable " + p.minAvailable.String() + ", to which it was switched during the downtime (maxUnavailable " + origMax + " is not restored)"
		case relaxedMin:
			v := intstr.Parse(origMin)
			w.minAvailable, note = &v, "restored minAvailable "+origMin
		default:
			v := intstr.Parse(origMax)
			w.maxUnavailable, note = &v, "restored maxUnavailable "+origMax
		}
		why := "the workloads whose pods it selects are no longer all scaled down"
		switch {
		case in.excluded:
			why = "excluded from scheduled scaling"
		case len(others) > 0:
			why = "it also selects pods the operator did not scale down: " + strings.Join(others, ", ")
		}
		return stateUp, w, []eventSpec{{reason: ReasonScaleUp, action: "Scale", note: note + ": " + why}}
	case relaxed:
		if p.annotations[AnnotationNextTransition] != next {
			// The workloads' schedule changed: keep the record current, and the relaxed
			// field with it, unless the budget was switched to the other one, which is
			// not the operator's to apply.
			w := &pdbWrite{next: next, original: keepAnnotations(p.annotations, AnnotationOriginalMinAvailable, AnnotationOriginalMaxUnavailable)}
			if !switched {
				w.minAvailable, w.maxUnavailable = p.minAvailable, p.maxUnavailable
			}
			return stateDown, w, nil
		}
		return stateDown, nil, nil
	case len(in.covered) == 0:
		return stateUnmanaged, nil, nil
	case len(downNames) == 0 || in.excluded:
		return stateUp, nil, nil
	case len(blockers) > 0:
		return stateUp, nil, []eventSpec{{reason: ReasonBudgetKept, action: "Skip", note: fmt.Sprintf(
			"not relaxed although %s %s scaled down: %s", strings.Join(downNames, ", "), isAre(len(downNames)), strings.Join(blockers, "; "))}}
	}
	w := &pdbWrite{next: next, relax: true}
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
		"%s while %s %s scaled down, so it blocks no node drain; restored when they come back", note, strings.Join(downNames, ", "), isAre(len(downNames)))}}
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
	limit := s.newLimit()
	b := ctrl.NewControllerManagedBy(s.mgr).
		Named("scaling-poddisruptionbudget").
		WithOptions(controller.Options{MaxConcurrentReconciles: limit.Workers()}).
		WatchesRawSource(source.Kind[client.Object](s.cache, &policyv1.PodDisruptionBudget{},
			&handler.TypedEnqueueRequestForObject[client.Object]{}, pdbPredicate())).
		WatchesRawSource(s.resync(func() client.ObjectList { return &policyv1.PodDisruptionBudgetList{} }))
	for _, k := range r.covered {
		b = b.WatchesRawSource(source.Kind(s.cache, k.newObject(), r.budgetsSelecting(templateLabels), coveredPredicate()))
	}
	if len(r.covered) > 0 {
		// A pod of something else appearing under a relaxed budget restores it.
		b = b.WatchesRawSource(source.Kind[client.Object](s.cache, podMetadata(),
			r.budgetsSelecting(client.Object.GetLabels), podPredicate()))
	}
	if err := b.Complete(workers.Reconciler(limit, r)); err != nil {
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
	// The cache holds the pods that have not finished only (see podMetadata).
	in, err := r.gather(ctx, r.s.cache, pdb)
	if err != nil {
		return ctrl.Result{}, err
	}
	st, w, events := decidePDB(in)
	if relaxes(w) {
		// A relaxed budget lets a drain evict every pod it selects: decide that on what
		// the API server holds now, not on a cache that may lag behind a pod just started.
		if in, err = r.gather(ctx, r.s.mgr.GetAPIReader(), pdb, client.MatchingFieldsSelector{Selector: unfinishedPods}); err != nil {
			return ctrl.Result{}, err
		}
		st, w, events = decidePDB(in)
	}
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

// relaxes reports whether a write relaxes a budget (rather than restore it or refresh
// its record).
func relaxes(w *pdbWrite) bool { return w != nil && w.relax }

// gather reads the budget's workloads (those of the covered kinds in its namespace whose
// pod template labels its selector matches) and the pods it selects, with their owners,
// from reader: the scaling cache, or the API server before a budget is relaxed.
func (r *pdbReconciler) gather(ctx context.Context, reader client.Reader, pdb *policyv1.PodDisruptionBudget, podFilter ...client.ListOption) (pdbInputs, error) {
	ns := &corev1.Namespace{}
	if err := r.s.cache.Get(ctx, types.NamespacedName{Name: pdb.Namespace}, ns); err != nil {
		// As for workloads: nothing is decided in a Namespace that cannot be read.
		return pdbInputs{}, fmt.Errorf("read namespace %s: %w", pdb.Namespace, err)
	}
	p := r.s.current()
	in := pdbInputs{
		pdb: pdbView{minAvailable: pdb.Spec.MinAvailable, maxUnavailable: pdb.Spec.MaxUnavailable,
			annotations: pdb.Annotations, controller: metav1.GetControllerOf(pdb)},
		excluded: p.excluded(pdb.Namespace, ns.Labels),
		dryRun:   p.dryRun,
	}
	// The budget's own exclude and dry-run annotations (or its namespace's) apply to it.
	now := r.s.opts.Clock.Now()
	cfg, err := resolve([]layer{{annotations: pdb.Annotations}, {source: "namespace " + pdb.Namespace, annotations: ns.Annotations}},
		r.s.gather.scheduleDefaults(ctx, p, ns), true, now)
	if err == nil {
		in.excluded = in.excluded || cfg.excluded(now)
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
		if err := reader.List(ctx, list, client.InNamespace(pdb.Namespace)); err != nil {
			return pdbInputs{}, fmt.Errorf("list %ss: %w", k.name, err)
		}
		for _, o := range workloadsOf(list) {
			if !sel.Matches(labels.Set(templateLabels(o))) {
				continue
			}
			level, _ := k.read(ctx, nil, o)
			in.covered = append(in.covered, coveredWorkload{kind: k.name, name: o.GetName(), uid: o.GetUID(), level: level, annotations: o.GetAnnotations()})
		}
	}
	if len(in.covered) == 0 {
		// Nothing the operator scales: the pods do not matter.
		return in, nil
	}
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	opts := append([]client.ListOption{client.InNamespace(pdb.Namespace), client.MatchingLabelsSelector{Selector: sel}}, podFilter...)
	if err := reader.List(ctx, pods, opts...); err != nil {
		return pdbInputs{}, fmt.Errorf("list pods: %w", err)
	}
	owners := ownerFinder{reader: reader, namespace: pdb.Namespace, replicaSets: map[string]*metav1.OwnerReference{}}
	for i := range pods.Items {
		p := &pods.Items[i]
		owner, err := owners.of(ctx, p)
		if err != nil {
			return pdbInputs{}, err
		}
		in.pods = append(in.pods, selectedPod{name: p.Name, owner: owner})
	}
	return in, nil
}

// ownerFinder follows a pod's controller references to the workload it belongs to.
type ownerFinder struct {
	reader    client.Reader
	namespace string
	// replicaSets caches the controller of each ReplicaSet looked up, by name and UID.
	replicaSets map[string]*metav1.OwnerReference
}

// of returns the owner of a pod: the Deployment that controls the ReplicaSet that
// controls it, or its own controller. A controller reference is followed only when the
// object it names exists with that UID, so a forged reference leads nowhere.
func (f *ownerFinder) of(ctx context.Context, pod metav1.Object) (podOwner, error) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil {
		return podOwner{}, nil
	}
	owner := podOwner{kind: ref.Kind, name: ref.Name, uid: ref.UID}
	if !isApps(ref.APIVersion) {
		if g := groupOf(ref.APIVersion); g != "" {
			// A Deployment or StatefulSet of another group is another kind altogether.
			owner.kind = ref.Kind + "." + g
		}
		return owner, nil
	}
	if ref.Kind != "ReplicaSet" {
		return owner, nil
	}
	key := ref.Name + "/" + string(ref.UID)
	rsController, seen := f.replicaSets[key]
	if !seen {
		rs := &metav1.PartialObjectMetadata{}
		rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
		err := f.reader.Get(ctx, types.NamespacedName{Namespace: f.namespace, Name: ref.Name}, rs)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return podOwner{}, fmt.Errorf("get ReplicaSet %s: %w", ref.Name, err)
		case rs.UID == ref.UID:
			rsController = metav1.GetControllerOf(rs)
		}
		f.replicaSets[key] = rsController
	}
	if rsController != nil && rsController.Kind == "Deployment" && isApps(rsController.APIVersion) {
		return podOwner{kind: "Deployment", name: rsController.Name, uid: rsController.UID}, nil
	}
	return owner, nil
}

func isApps(apiVersion string) bool { return groupOf(apiVersion) == appsv1.GroupName }

func groupOf(apiVersion string) string {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return ""
	}
	return group
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
	annotations := w.annotationsFor()
	ac := policyv1ac.PodDisruptionBudget(pdb.Name, pdb.Namespace).
		WithUID(pdb.UID).WithResourceVersion(pdb.ResourceVersion).
		WithAnnotations(annotations).WithSpec(spec)
	return applyEnding(ctx, r.s.mgr.GetClient(), "PodDisruptionBudget", ac, ac.ObjectMetaApplyConfiguration,
		policyv1.SchemeGroupVersion.WithKind(pdbKindName), pdb,
		ended(pdb.Annotations, annotations, AnnotationOriginalMinAvailable, AnnotationOriginalMaxUnavailable, AnnotationNextTransition))
}

// budgetsSelecting maps a workload (by its pod template's labels) or a pod (by its own)
// to the PodDisruptionBudgets in its namespace that select it.
func (r *pdbReconciler) budgetsSelecting(podLabels func(client.Object) map[string]string) handler.TypedEventHandler[client.Object, reconcile.Request] {
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
			if err == nil && sel.Matches(labels.Set(podLabels(o))) {
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

// podPredicate passes the pod changes that can change a budget's decision: a pod
// appearing or going (a pod that finishes leaves the cache: see podMetadata), changing
// labels or controller, or being deleted. The kubelet's status updates do not change
// the metadata; they pass only as a pod that finishes.
func podPredicate() predicate.TypedFuncs[client.Object] {
	return predicate.TypedFuncs[client.Object]{
		UpdateFunc: func(e event.TypedUpdateEvent[client.Object]) bool {
			old, cur := e.ObjectOld, e.ObjectNew
			return !maps.Equal(old.GetLabels(), cur.GetLabels()) ||
				!equality.Semantic.DeepEqual(old.GetOwnerReferences(), cur.GetOwnerReferences()) ||
				old.GetDeletionTimestamp().IsZero() != cur.GetDeletionTimestamp().IsZero()
		},
		GenericFunc: func(event.TypedGenericEvent[client.Object]) bool { return false },
	}
}

// unfinishedPods selects the pods that have not finished: one that succeeded or failed
// runs nothing a drain could disrupt.
var unfinishedPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)))

// podMetadata is how the scaling cache holds pods: their metadata only, of those that
// have not finished (unfinishedPods, which the API server applies to the watch: a pod
// that finishes is deleted from the cache). A cluster's pods are its most numerous
// objects; a typed Pod, even slimmed, is a 1.2 KB struct before its strings.
func podMetadata() client.Object {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return m
}

// slimPod keeps what budgets read of pods: name, namespace, labels and the controller
// reference. The strings many pods share (the namespace, label keys and values, the
// controller's kind and name) are shared in the cache too (podStrings).
func slimPod(obj any) (any, error) {
	p, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	meta := metav1.ObjectMeta{
		Name:              p.Name,
		Namespace:         podStrings.Of(p.Namespace),
		DeletionTimestamp: p.DeletionTimestamp,
	}
	if len(p.Labels) > 0 {
		meta.Labels = make(map[string]string, len(p.Labels))
		for k, v := range p.Labels {
			meta.Labels[podStrings.Of(k)] = podStrings.Of(v)
		}
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		meta.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: podStrings.Of(ref.APIVersion), Kind: podStrings.Of(ref.Kind), Name: podStrings.Of(ref.Name),
			UID: types.UID(podStrings.Of(string(ref.UID))), Controller: ptr.To(true),
		}}
	}
	return &metav1.PartialObjectMetadata{TypeMeta: p.TypeMeta, ObjectMeta: meta}, nil
}

// podStrings shares the strings of cached pods.
var podStrings = intern.New(1 << 16)
