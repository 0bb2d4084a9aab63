package scaling

import (
	"context"
	"fmt"
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

	in, err := r.gather(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := decide(in)
	if d.state == stateUnmanaged && d.workload == nil && d.hpa == nil {
		r.forget(req)
		return ctrl.Result{}, nil
	}

	if d.dryRun {
		if d.workload != nil || d.hpa != nil {
			log.Info("dry run: not writing", "write", d.workload != nil, "autoscalerWrite", d.hpa != nil)
		}
	} else {
		if d.workload != nil {
			if err := k.write(ctx, r.s.mgr.GetClient(), obj, d.workload); err != nil {
				return ctrl.Result{}, err
			}
		}
		if err := r.writeAutoscaler(ctx, obj, d.hpa); err != nil {
			return ctrl.Result{}, err
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

func (r *reconciler) forget(req ctrl.Request) {
	tracked.forget(r.kind.name, req.NamespacedName)
	r.wake.at(req, time.Time{})
}

// gather reads what a decision needs: the object and its level, the layers of
// annotations under its own, and what autoscales it, all from the scaler's cache (a
// kind scaled through /scale reads its level from there).
func (r *reconciler) gather(ctx context.Context, obj client.Object) (inputs, error) {
	k, p, reader := r.kind, r.s.policy, r.s.cache
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, types.NamespacedName{Name: obj.GetNamespace()}, ns); err != nil && !apierrors.IsNotFound(err) {
		return inputs{}, fmt.Errorf("get namespace: %w", err)
	}
	excluded := p.excluded(ns.Name, ns.Labels)
	var layers []layer
	if k.extraLayer != nil {
		if l, ok := k.extraLayer(ctx, reader, obj); ok {
			layers = append(layers, l)
		}
	}
	layers = append(layers, layer{source: "namespace " + obj.GetNamespace(), annotations: ns.Annotations})
	if p.defaults != nil && !excluded {
		layers = append(layers, layer{source: "the operator's defaults", annotations: p.defaults})
	}
	in := inputs{
		now:  r.s.opts.Clock.Now(),
		kind: k.traits,
		workload: workloadView{
			annotations: obj.GetAnnotations(),
			created:     obj.GetCreationTimestamp().Time,
			controller:  metav1.GetControllerOf(obj),
		},
		layers:            layers,
		namespaceExcluded: excluded,
		defaults:          p.scheduleDefaults,
		grace:             p.grace,
		dryRun:            p.dryRun,
	}
	if !in.managed() {
		// Nothing to decide: spare the reads below (the /scale read is a request).
		return in, nil
	}
	level, err := k.read(ctx, r.s.mgr.GetClient(), obj)
	if err != nil {
		return inputs{}, err
	}
	in.workload.level = level
	if !k.autoscaled {
		return in, nil
	}
	if in.hpas, err = r.autoscalers(ctx, obj); err != nil {
		return inputs{}, err
	}
	if r.s.kedaActive() {
		if in.delegate, err = scaledObjectFor(ctx, reader, obj.GetNamespace(), k.gvk.GroupKind(), obj.GetName()); err != nil {
			return inputs{}, err
		}
	}
	return in, nil
}

// autoscalers returns the HorizontalPodAutoscalers that target obj.
func (r *reconciler) autoscalers(ctx context.Context, obj client.Object) ([]hpaView, error) {
	list := &autoscalingv2.HorizontalPodAutoscalerList{}
	if err := r.s.cache.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{hpaTargetIndex: targetKey(r.kind.gvk.GroupKind(), obj.GetName())}); err != nil {
		return nil, fmt.Errorf("list autoscalers: %w", err)
	}
	hpas := make([]hpaView, 0, len(list.Items))
	for i := range list.Items {
		h := &list.Items[i]
		_, savedOwn := h.Annotations[AnnotationOriginalReplicas]
		hpas = append(hpas, hpaView{
			name: h.Name, minReplicas: ptr.Deref(h.Spec.MinReplicas, 1), annotations: h.Annotations,
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
	ac := autoscalingv2ac.HorizontalPodAutoscaler(h.name, obj.GetNamespace()).
		WithUID(h.uid).WithResourceVersion(h.resourceVersion).
		WithAnnotations(h.annotationsFor()).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().WithMinReplicas(h.minReplicas))
	return apply(ctx, r.s.mgr.GetClient(), fmt.Sprintf("minReplicas %d to autoscaler %s", h.minReplicas, h.name), ac)
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
