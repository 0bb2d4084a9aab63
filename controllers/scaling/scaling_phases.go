package scaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/internal/schedule"
)

// reconciler decides the objects of one kind.
type reconciler struct {
	kind *kind
	s    *scaler
	wake *wakeups
}

// Reconcile decides one object: gather what the decision reads, decide, write what
// differs, report, and wake the object again at its next transition.
func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	k := r.kind
	obj := k.newObject()
	if err := r.s.cache.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get %s: %w", k.name, err)
	}
	if !obj.GetDeletionTimestamp().IsZero() || (k.skip != nil && k.skip(obj)) {
		r.forget(req)
		return ctrl.Result{}, nil
	}

	in, err := r.s.gather.gather(ctx, k, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := r.decide(ctx, obj, in)
	if d.state == stateUnmanaged && d.workload == nil && d.hpa == nil {
		r.forget(req)
		return ctrl.Result{}, nil
	}

	restoring := slices.Contains(d.actions, actionScaleUp) || slices.Contains(d.actions, actionHPARestore)
	if d.dryRun {
		if d.workload != nil || d.hpa != nil {
			log.Info("dry run: not writing", "write", d.workload != nil, "autoscalerWrite", d.hpa != nil)
		}
	} else {
		if !restoring {
			r.s.pacer.release(obj.GetUID())
			r.s.deps.release(r.waiterKey(obj))
		} else {
			again, warnings, err := r.awaitDependencies(ctx, obj, d, in.now)
			if err != nil {
				return ctrl.Result{}, err
			}
			if !again.IsZero() {
				// It waits for the workloads its wake-after names: nothing is written or
				// reported until they are Ready, or the wait times out.
				r.wake.at(req, again)
				return ctrl.Result{}, nil
			}
			d.events = append(d.events, warnings...)
			wanted := r.s.deps.wanted(dependencyKey{kind: k.name, namespace: obj.GetNamespace(), name: obj.GetName()})
			if slot := r.s.pacer.admit(obj.GetUID(), restoreRank(d.priority, wanted), in.now); !slot.IsZero() {
				// Its turn under --scaling-restore-rate comes later: nothing is written or
				// reported until then.
				r.wake.at(req, slot)
				log.V(1).Info("restore waits for its turn", "at", stamp(slot))
				return ctrl.Result{}, nil
			}
		}
		scheduled, scheduledErr := time.Parse(time.RFC3339, obj.GetAnnotations()[AnnotationNextTransition])
		if d.workload != nil {
			if err := k.write(ctx, r.s.mgr.GetClient(), obj, d.workload); err != nil {
				return ctrl.Result{}, err
			}
		}
		if err := r.writeAutoscaler(ctx, obj, d.hpa); err != nil {
			return ctrl.Result{}, err
		}
		if restoring {
			r.s.deps.release(r.waiterKey(obj))
			if scheduledErr == nil && !in.now.Before(scheduled) {
				restoreLag.WithLabelValues(k.name).Observe(in.now.Sub(scheduled).Seconds())
			}
		}
	}
	countActions(k.name, d.actions, d.dryRun)
	if tracked.observe(k.name, req.NamespacedName, d) {
		r.s.emit(ctx, obj, d)
	}
	r.wake.at(req, d.requeueAt)
	log.V(1).Info("decided", "state", d.state, "level", in.workload.level, "next", stamp(d.requeueAt))
	return ctrl.Result{}, nil
}

// decide decides, and for a manual change looks up who made it (a GitOps controller
// would make it again at every sync) and decides again with that.
func (r *reconciler) decide(ctx context.Context, obj client.Object, in inputs) decision {
	k := r.kind
	d := decide(in)
	if d.state == stateOverride && k.levelField != nil {
		if w, found, err := r.s.writers.of(ctx, k, obj); err != nil {
			ctrl.LoggerFrom(ctx).Info("could not tell who changed the level", "error", err.Error())
		} else if found {
			in.levelWriter = &w
			d = decide(in)
		}
	}
	if k.restoreNote != nil && slices.Contains(d.actions, actionScaleUp) {
		if extra := k.restoreNote(obj); extra != "" {
			for i := range d.events {
				if d.events[i].reason == ReasonScaleUp {
					d.events[i].note += "; " + extra
				}
			}
		}
	}
	return d
}

func (r *reconciler) forget(req ctrl.Request) {
	tracked.forget(r.kind.name, req.NamespacedName)
	r.s.deps.release(waiterKey{kind: r.kind.name, obj: req.NamespacedName})
	r.wake.at(req, time.Time{})
}

// gatherer reads what a decision needs. The operator's reads its cache; kubectl
// phalanks' reads through the user's own client, so both decide from the same inputs.
type gatherer struct {
	// reader reads namespaces, autoscalers (by hpaTargetIndex) and ScaledObjects.
	reader client.Reader
	// client reads the level of kinds scaled through /scale.
	client client.Client
	// policy is the operator-wide policy of the decision it is called for.
	policy    func() *policy
	calendars *Calendars
	now       func() time.Time
	// keda reports whether KEDA ScaledObjects are scaled (and so may delegate).
	keda func() bool
}

func (s *scaler) gatherer() *gatherer {
	return &gatherer{reader: s.cache, client: s.mgr.GetClient(), policy: s.current, calendars: s.calendars,
		now: s.opts.Clock.Now, keda: s.kedaActive}
}

// scheduleDefaults are the policy's defaults with the calendars the schedules of
// objects in namespace ns see.
func (g *gatherer) scheduleDefaults(ctx context.Context, p *policy, ns *corev1.Namespace) schedule.Defaults {
	d := p.scheduleDefaults
	d.Calendars = g.calendars.In(ctx, ns.Name, ShadowCalendars(ns))
	return d
}

// gather reads what a decision about obj, of kind k, needs: the object and its level,
// the layers of annotations under its own, and what autoscales it.
func (g *gatherer) gather(ctx context.Context, k *kind, obj client.Object) (inputs, error) {
	p, reader := g.policy(), g.reader
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, types.NamespacedName{Name: obj.GetNamespace()}, ns); err != nil {
		// A Namespace the cache does not hold yet (one just created) may be excluded by
		// its name or its labels: nothing is decided until it can be read.
		return inputs{}, fmt.Errorf("read namespace %s: %w", obj.GetNamespace(), err)
	}
	excluded := p.excluded(obj.GetNamespace(), ns.Labels)
	scoped := p.defaultKinds[k.resource]
	var layers []layer
	if k.extraLayer != nil {
		if l, ok := k.extraLayer(ctx, reader, obj); ok {
			layers = append(layers, l)
			// A ScaledObject pauses the workload it scales: the Namespace's schedule and
			// the operator's defaults reach it as they reach that workload.
			scoped = scoped || p.defaultKinds[l.resource]
		}
	}
	nsAnnotations := ns.Annotations
	if !scoped {
		// Of the Namespace's annotations, only those that scale nothing down reach
		// the kinds the defaults do not schedule.
		nsAnnotations = pickKeys(ns.Annotations, exclusionGroup, dryRunGroup, graceGroup, wakeLeadGroup, priorityGroup, wakeAfterGroup)
	}
	layers = append(layers, layer{source: "namespace " + obj.GetNamespace(), annotations: nsAnnotations})
	if scoped && p.defaults != nil && !excluded {
		layers = append(layers, layer{source: "the operator's defaults", annotations: p.defaults})
	}
	in := inputs{
		now:  g.now(),
		kind: k.traits,
		workload: workloadView{
			annotations:   obj.GetAnnotations(),
			created:       obj.GetCreationTimestamp().Time,
			controller:    metav1.GetControllerOf(obj),
			podRequests:   templateRequests(obj),
			priorityClass: priorityClassOf(obj),
		},
		layers:            layers,
		levelField:        strings.Join(k.levelField, "."),
		namespaceExcluded: excluded,
		defaults:          g.scheduleDefaults(ctx, p, ns),
		grace:             p.grace,
		wakeLead:          p.wakeLead,
		dryRun:            p.dryRun,
	}
	var err error
	if k.autoscaled {
		// Read first: an autoscaler the operator lowered makes the workload its business
		// until it is restored, even without a schedule.
		if in.hpas, err = g.autoscalers(ctx, k, obj); err != nil {
			return inputs{}, err
		}
	}
	if !in.managed() {
		// Nothing to decide: spare the reads below (the /scale read is a request).
		return in, nil
	}
	level, err := k.read(ctx, g.client, obj)
	if err != nil {
		return inputs{}, err
	}
	in.workload.level = level
	if k.maxReplicas != nil {
		in.workload.maxReplicas = k.maxReplicas(obj)
	}
	if !k.autoscaled {
		return in, nil
	}
	if g.keda() {
		if in.delegate, err = scaledObjectFor(ctx, reader, obj.GetNamespace(), k.gvk.GroupKind(), obj.GetName()); err != nil {
			return inputs{}, err
		}
	}
	return in, nil
}

// autoscalers returns the HorizontalPodAutoscalers that target obj.
func (g *gatherer) autoscalers(ctx context.Context, k *kind, obj client.Object) ([]hpaView, error) {
	list := &autoscalingv2.HorizontalPodAutoscalerList{}
	if err := g.reader.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{hpaTargetIndex: targetKey(k.gvk.GroupKind(), obj.GetName())}); err != nil {
		return nil, fmt.Errorf("list autoscalers: %w", err)
	}
	hpas := make([]hpaView, 0, len(list.Items))
	for i := range list.Items {
		h := &list.Items[i]
		_, savedOwn := h.Annotations[AnnotationOriginalReplicas]
		hpas = append(hpas, hpaView{
			name: h.Name, minReplicas: ptr.Deref(h.Spec.MinReplicas, 1), maxReplicas: h.Spec.MaxReplicas, annotations: h.Annotations,
			controller: metav1.GetControllerOf(h), scheduled: ownSchedule(h.Annotations) || savedOwn,
			uid: h.UID, resourceVersion: h.ResourceVersion,
		})
	}
	return hpas, nil
}

// writeAutoscaler applies the operator's part of the autoscaler targeting the workload,
// with the UID and resourceVersion it decided on, as the workload writes do.
func (r *reconciler) writeAutoscaler(ctx context.Context, obj client.Object, h *hpaWrite) error {
	if h == nil {
		return nil
	}
	annotations := h.annotationsFor()
	ac := autoscalingv2ac.HorizontalPodAutoscaler(h.name, obj.GetNamespace()).
		WithUID(h.uid).WithResourceVersion(h.resourceVersion).
		WithAnnotations(annotations).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().WithMinReplicas(h.minReplicas))
	hpa := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: h.name}}
	return applyEnding(ctx, r.s.mgr.GetClient(), fmt.Sprintf("minReplicas %d to autoscaler %s", h.minReplicas, h.name), ac, ac.ObjectMetaApplyConfiguration,
		autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"), hpa,
		ended(h.annotations, annotations, AnnotationOriginalMinReplicas, AnnotationNextTransition))
}

// emit logs the decision's events and records them on the object.
func (s *scaler) emit(ctx context.Context, obj client.Object, d decision) {
	log := ctrl.LoggerFrom(ctx)
	for _, e := range d.events {
		note := e.note
		if d.dryRun && e.action == "Scale" {
			note = "dry run, nothing written: " + note
		}
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		log.Info(note, "reason", e.reason, "state", d.state)
		s.recorder.Eventf(obj, nil, typ, e.reason, e.action, "%s", truncate(note, maxNote))
	}
}

// maxNote is the longest note the API server accepts on an events.k8s.io Event.
const maxNote = 1024

// truncate shortens s to at most n bytes, on a character boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
