package scaling

import (
	"context"
	"fmt"
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

// gather reads what a decision needs: the workload, its Namespace's annotations and
// the autoscalers that target it, all from the scaler's cache.
func (r *reconciler) gather(ctx context.Context, obj client.Object) (inputs, error) {
	ns := &corev1.Namespace{}
	if err := r.reader.Get(ctx, types.NamespacedName{Name: obj.GetNamespace()}, ns); err != nil && !apierrors.IsNotFound(err) {
		return inputs{}, fmt.Errorf("get namespace: %w", err)
	}
	list := &autoscalingv2.HorizontalPodAutoscalerList{}
	if err := r.reader.List(ctx, list, client.InNamespace(obj.GetNamespace()),
		client.MatchingFields{hpaTargetIndex: r.kind.name + "/" + obj.GetName()}); err != nil {
		return inputs{}, fmt.Errorf("list autoscalers: %w", err)
	}
	hpas := make([]hpaView, 0, len(list.Items))
	for _, h := range list.Items {
		hpas = append(hpas, hpaView{name: h.Name, minReplicas: ptr.Deref(h.Spec.MinReplicas, 1), annotations: h.Annotations,
			uid: h.UID, resourceVersion: h.ResourceVersion})
	}
	return inputs{
		now: r.clock.Now(),
		workload: workloadView{
			kind:        r.kind.name,
			replicas:    r.kind.replicas(obj),
			annotations: obj.GetAnnotations(),
			created:     obj.GetCreationTimestamp().Time,
			controller:  metav1.GetControllerOf(obj),
		},
		namespace:            obj.GetNamespace(),
		namespaceAnnotations: ns.Annotations,
		hpas:                 hpas,
		defaults:             r.defaults,
		grace:                r.grace,
	}, nil
}

// writeWorkload applies the operator's part of the workload. The apply carries the
// UID and resourceVersion it decided on, so it fails with a conflict (and is retried)
// rather than save a count someone changed in the meantime.
func (r *reconciler) writeWorkload(ctx context.Context, obj client.Object, w *workloadWrite) error {
	if w == nil {
		return nil
	}
	if err := r.writer.Apply(ctx, r.kind.apply(obj, w), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply replicas %d to %s: %w", w.replicas, r.kind.name, err)
	}
	return nil
}

// writeAutoscaler applies the operator's part of the autoscaler targeting the workload,
// with the UID and resourceVersion it decided on, as writeWorkload does.
func (r *reconciler) writeAutoscaler(ctx context.Context, obj client.Object, h *hpaWrite) error {
	if h == nil {
		return nil
	}
	ac := autoscalingv2ac.HorizontalPodAutoscaler(h.name, obj.GetNamespace()).
		WithUID(h.uid).WithResourceVersion(h.resourceVersion).
		WithAnnotations(h.annotationsFor()).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().WithMinReplicas(h.minReplicas))
	if err := r.writer.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply minReplicas %d to autoscaler %s: %w", h.minReplicas, h.name, err)
	}
	return nil
}

// emit logs the decision's events and records them on the workload.
func (r *reconciler) emit(ctx context.Context, obj client.Object, d decision) {
	log := ctrl.LoggerFrom(ctx)
	for _, e := range d.events {
		note := e.note
		if r.dryRun && e.action == "Scale" {
			note = "dry run, nothing written: " + note
		}
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		log.Info(note, "reason", e.reason, "state", d.state)
		r.recorder.Eventf(obj, nil, typ, e.reason, e.action, "%s", truncate(note, maxNote))
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
