package scaling

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kind is what differs between the kinds the operator scales; the decision is shared.
type kind struct {
	traits
	gvk schema.GroupVersionKind
	// resource is the flag name, "<plural>.<group>".
	resource string
	// newObject returns an empty object as the scaling cache holds it.
	newObject func() client.Object
	newList   func() client.ObjectList
	// autoscaled kinds can be the target of HPAs and KEDA ScaledObjects.
	autoscaled bool
	// skip reports objects left alone without a word (Jobs a CronJob created).
	skip func(client.Object) bool
	// read returns the current level: from the object, or for kinds scaled through the
	// /scale subresource, from there.
	read func(ctx context.Context, c client.Client, obj client.Object) (int32, error)
	// write applies the operator's part of the object.
	write func(ctx context.Context, c client.Client, obj client.Object, w *workloadWrite) error
	// transform slims objects of the kind in the cache.
	transform toolscache.TransformFunc
	// levelField is the path of the field that holds the level (spec.replicas), whose
	// field manager tells who changed it; nil where a change leaves no owner to name.
	levelField []string
	// restoreNote says what a restore of the object keeps that differs from what was
	// saved at its scale-down; nil or empty for nothing.
	restoreNote func(client.Object) string
	// extraLayer returns annotations read after the object's own (a ScaledObject's
	// target workload); nil for most kinds.
	extraLayer func(ctx context.Context, reader client.Reader, obj client.Object) (layer, bool)
	// maxReplicas returns the bound a restored level may not exceed, as the object has it
	// now (an HPA's maxReplicas over its minReplicas); nil for kinds without one.
	maxReplicas func(client.Object) int32
}

// fromObject makes a read function of a level the cached object holds.
func fromObject[T client.Object](level func(T) int32) func(context.Context, client.Client, client.Object) (int32, error) {
	return func(_ context.Context, _ client.Client, o client.Object) (int32, error) { return level(o.(T)), nil }
}

// apply applies the operator's part of an object as its field manager. Every apply
// carries the UID and resourceVersion the decision read, so it fails with a conflict
// (and is decided again) rather than save a count someone changed in the meantime.
func apply(ctx context.Context, c client.Client, what string, ac runtime.ApplyConfiguration) error {
	if err := c.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s: %w", what, err)
	}
	return nil
}

// recordKeys are the annotations the operator keeps on an object it scales down, and
// removes when it restores it.
var recordKeys = []string{AnnotationOriginalReplicas, AnnotationScaledDownAt, AnnotationPodRequests, AnnotationNextTransition}

// ended returns those of keys that have (an object's annotations as the decision read
// them) holds and want (what the operator's write leaves) does not: the operator's
// annotations its write ends.
func ended(have, want map[string]string, keys ...string) []string {
	var out []string
	for _, k := range keys {
		_, had := have[k]
		_, kept := want[k]
		if had && !kept {
			out = append(out, k)
		}
	}
	return out
}

// applyEnding applies ac, the operator's part of obj (of gvk), whose metadata meta the
// API server's answer fills in, and then removes those of the annotations in gone that
// the object still holds.
//
// Server-side apply deletes a field the operator stops applying only when no other
// field manager owns it too. One that wrote it during the downtime (kubectl annotate
// --overwrite, kubectl edit, Helm, a Velero restore, exported YAML applied again)
// shares it, and it would survive the restore: original-replicas would then be taken
// for a count to restore at every later change of the replicas, and KEDA's
// paused-replicas would pause a ScaledObject for good. So what the apply left is removed
// with a merge patch of nulls, on the resourceVersion the apply returned.
func applyEnding(ctx context.Context, c client.Client, what string, ac runtime.ApplyConfiguration,
	meta *metav1ac.ObjectMetaApplyConfiguration, gvk schema.GroupVersionKind, obj client.Object, gone []string) error {
	if err := apply(ctx, c, what, ac); err != nil {
		return err
	}
	if len(gone) == 0 || meta == nil {
		return nil
	}
	return removeAnnotations(ctx, c, gvk, client.ObjectKeyFromObject(obj), meta.Annotations, ptr.Deref(meta.ResourceVersion, ""), gone)
}

// removeAnnotations removes those of keys that after (an object's annotations as a write
// left them, at resourceVersion rv) still holds, with rv as precondition: a change made
// since fails it, and the object is decided again.
func removeAnnotations(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, key client.ObjectKey,
	after map[string]string, rv string, keys []string) error {
	nulls := map[string]any{}
	for _, k := range keys {
		if _, ok := after[k]; ok {
			nulls[k] = nil
		}
	}
	if len(nulls) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": rv, "annotations": nulls}})
	if err != nil {
		return err
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("remove %s that another field manager also wrote from %s %s: %w", strings.Join(slices.Sorted(maps.Keys(nulls)), ", "), gvk.Kind, key.Name, err)
	}
	return nil
}

// runningOrStopped is the level of a kind that runs or stops.
func runningOrStopped(stopped bool) int32 {
	if stopped {
		return 0
	}
	return 1
}

var deployments = &kind{
	traits:     traits{name: "Deployment"},
	gvk:        appsv1.SchemeGroupVersion.WithKind("Deployment"),
	resource:   "deployments.apps",
	levelField: []string{"spec", "replicas"},
	newObject:  func() client.Object { return &appsv1.Deployment{} },
	newList:    func() client.ObjectList { return &appsv1.DeploymentList{} },
	autoscaled: true,
	read:       fromObject(func(d *appsv1.Deployment) int32 { return ptr.Deref(d.Spec.Replicas, 1) }),
	write: func(ctx context.Context, c client.Client, o client.Object, w *workloadWrite) error {
		annotations := w.annotationsFor()
		ac := appsv1ac.Deployment(o.GetName(), o.GetNamespace()).
			WithUID(o.GetUID()).WithResourceVersion(o.GetResourceVersion()).
			WithAnnotations(annotations).
			WithSpec(appsv1ac.DeploymentSpec().WithReplicas(w.level))
		return applyEnding(ctx, c, fmt.Sprintf("replicas %d to Deployment", w.level), ac, ac.ObjectMetaApplyConfiguration,
			appsv1.SchemeGroupVersion.WithKind("Deployment"), o, ended(o.GetAnnotations(), annotations, recordKeys...))
	},
	transform: func(obj any) (any, error) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return obj, nil
		}
		return &appsv1.Deployment{ObjectMeta: slimMeta(d.ObjectMeta), Spec: appsv1.DeploymentSpec{
			Replicas: d.Spec.Replicas,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: d.Spec.Template.Labels, Annotations: slimTemplateAnnotations(&d.Spec.Template)},
				Spec:       corev1.PodSpec{PriorityClassName: d.Spec.Template.Spec.PriorityClassName}},
		}, Status: appsv1.DeploymentStatus{ // whether it is Ready, for the restores that wait for it
			ObservedGeneration: d.Status.ObservedGeneration, AvailableReplicas: d.Status.AvailableReplicas,
		}}, nil
	},
}

var statefulSets = &kind{
	traits:     traits{name: "StatefulSet"},
	gvk:        appsv1.SchemeGroupVersion.WithKind("StatefulSet"),
	resource:   "statefulsets.apps",
	levelField: []string{"spec", "replicas"},
	newObject:  func() client.Object { return &appsv1.StatefulSet{} },
	newList:    func() client.ObjectList { return &appsv1.StatefulSetList{} },
	autoscaled: true,
	read:       fromObject(func(s *appsv1.StatefulSet) int32 { return ptr.Deref(s.Spec.Replicas, 1) }),
	write: func(ctx context.Context, c client.Client, o client.Object, w *workloadWrite) error {
		annotations := w.annotationsFor()
		ac := appsv1ac.StatefulSet(o.GetName(), o.GetNamespace()).
			WithUID(o.GetUID()).WithResourceVersion(o.GetResourceVersion()).
			WithAnnotations(annotations).
			WithSpec(appsv1ac.StatefulSetSpec().WithReplicas(w.level))
		return applyEnding(ctx, c, fmt.Sprintf("replicas %d to StatefulSet", w.level), ac, ac.ObjectMetaApplyConfiguration,
			appsv1.SchemeGroupVersion.WithKind("StatefulSet"), o, ended(o.GetAnnotations(), annotations, recordKeys...))
	},
	transform: func(obj any) (any, error) {
		s, ok := obj.(*appsv1.StatefulSet)
		if !ok {
			return obj, nil
		}
		return &appsv1.StatefulSet{ObjectMeta: slimMeta(s.ObjectMeta), Spec: appsv1.StatefulSetSpec{
			Replicas: s.Spec.Replicas,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: s.Spec.Template.Labels, Annotations: slimTemplateAnnotations(&s.Spec.Template)},
				Spec:       corev1.PodSpec{PriorityClassName: s.Spec.Template.Spec.PriorityClassName}},
		}, Status: appsv1.StatefulSetStatus{ // whether it is Ready, for the restores that wait for it
			ObservedGeneration: s.Status.ObservedGeneration, AvailableReplicas: s.Status.AvailableReplicas,
		}}, nil
	},
}

// suspendTraits describe kinds stopped through spec.suspend.
func suspendTraits(name string) traits {
	return traits{name: name, onOff: true,
		stopped: "suspended (spec.suspend: true)", running: "not suspended (spec.suspend: false)"}
}

var cronJobs = &kind{
	traits:     suspendTraits("CronJob"),
	gvk:        batchv1.SchemeGroupVersion.WithKind("CronJob"),
	resource:   "cronjobs.batch",
	levelField: []string{"spec", "suspend"},
	newObject:  func() client.Object { return &batchv1.CronJob{} },
	newList:    func() client.ObjectList { return &batchv1.CronJobList{} },
	read: fromObject(func(c *batchv1.CronJob) int32 {
		return runningOrStopped(ptr.Deref(c.Spec.Suspend, false))
	}),
	write: func(ctx context.Context, c client.Client, o client.Object, w *workloadWrite) error {
		annotations := w.annotationsFor()
		ac := batchv1ac.CronJob(o.GetName(), o.GetNamespace()).
			WithUID(o.GetUID()).WithResourceVersion(o.GetResourceVersion()).
			WithAnnotations(annotations).
			WithSpec(batchv1ac.CronJobSpec().WithSuspend(w.level == 0))
		return applyEnding(ctx, c, "suspend to CronJob", ac, ac.ObjectMetaApplyConfiguration,
			batchv1.SchemeGroupVersion.WithKind("CronJob"), o, ended(o.GetAnnotations(), annotations, recordKeys...))
	},
	transform: func(obj any) (any, error) {
		c, ok := obj.(*batchv1.CronJob)
		if !ok {
			return obj, nil
		}
		out := &batchv1.CronJob{ObjectMeta: slimMeta(c.ObjectMeta), Spec: batchv1.CronJobSpec{Suspend: c.Spec.Suspend}}
		out.Spec.JobTemplate.Spec.Template.Spec.PriorityClassName = c.Spec.JobTemplate.Spec.Template.Spec.PriorityClassName
		return out, nil
	},
}

var jobs = &kind{
	traits:     suspendTraits("Job"),
	gvk:        batchv1.SchemeGroupVersion.WithKind("Job"),
	resource:   "jobs.batch",
	levelField: []string{"spec", "suspend"},
	newObject:  func() client.Object { return &batchv1.Job{} },
	newList:    func() client.ObjectList { return &batchv1.JobList{} },
	// A CronJob's Jobs are its own business: the CronJob is what gets suspended.
	skip: func(o client.Object) bool {
		ref := metav1.GetControllerOfNoCopy(o)
		return ref != nil && ref.Kind == "CronJob" && strings.HasPrefix(ref.APIVersion, batchv1.GroupName+"/")
	},
	read: fromObject(func(j *batchv1.Job) int32 { return runningOrStopped(ptr.Deref(j.Spec.Suspend, false)) }),
	write: func(ctx context.Context, c client.Client, o client.Object, w *workloadWrite) error {
		annotations := w.annotationsFor()
		ac := batchv1ac.Job(o.GetName(), o.GetNamespace()).
			WithUID(o.GetUID()).WithResourceVersion(o.GetResourceVersion()).
			WithAnnotations(annotations).
			WithSpec(batchv1ac.JobSpec().WithSuspend(w.level == 0))
		return applyEnding(ctx, c, "suspend to Job", ac, ac.ObjectMetaApplyConfiguration,
			batchv1.SchemeGroupVersion.WithKind("Job"), o, ended(o.GetAnnotations(), annotations, recordKeys...))
	},
	transform: func(obj any) (any, error) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return obj, nil
		}
		out := &batchv1.Job{ObjectMeta: slimMeta(j.ObjectMeta), Spec: batchv1.JobSpec{Suspend: j.Spec.Suspend}}
		out.Spec.Template.Spec.PriorityClassName = j.Spec.Template.Spec.PriorityClassName
		return out, nil
	},
}

// NodeSelectorScaledDown is the node label a scaled-down DaemonSet's pods select; the
// operator assumes no node carries it.
const NodeSelectorScaledDown = annotationPrefix + "scaled-down"

// AnnotationOriginalNodeSelector is written by the operator on a scaled-down DaemonSet:
// the pod template's nodeSelector to restore, as JSON ({} for none).
const AnnotationOriginalNodeSelector = annotationPrefix + "original-node-selector"

var daemonSets = &kind{
	traits: traits{name: "DaemonSet", onOff: true,
		stopped: "moved off every node (nodeSelector " + NodeSelectorScaledDown + ", which no node has)",
		running: "on its nodes (its own nodeSelector restored)"},
	gvk:        appsv1.SchemeGroupVersion.WithKind("DaemonSet"),
	resource:   "daemonsets.apps",
	levelField: []string{"spec", "template", "spec", "nodeSelector"},
	newObject:  func() client.Object { return &appsv1.DaemonSet{} },
	newList:    func() client.ObjectList { return &appsv1.DaemonSetList{} },
	read: fromObject(func(d *appsv1.DaemonSet) int32 {
		_, down := d.Spec.Template.Spec.NodeSelector[NodeSelectorScaledDown]
		return runningOrStopped(down)
	}),
	write:       writeDaemonSet,
	restoreNote: nodeSelectorChanges,
	transform:   slimDaemonSet,
}

// writeDaemonSet moves a DaemonSet's pods off every node and back. The pod template's
// nodeSelector is one atomic field under server-side apply, so the operator applies it
// whole: for a downtime, the DaemonSet's selector as it is plus NodeSelectorScaledDown,
// with the selector as it was saved first in AnnotationOriginalNodeSelector (in the same
// write); at the restore, the selector as it is now without NodeSelectorScaledDown. A
// change made during the downtime (a helm upgrade that moves disk: ssd to disk: nvme
// keeps the operator's key through its three-way merge) therefore survives the restore;
// the saved copy only tells whether the operator's key is all that differs.
//
// A restore that leaves no selector applies an empty one, explicitly: leaving the field
// out would delete it only if the operator alone owned it, and one someone else wrote
// during the downtime (a kubectl edit that removed the DaemonSet's own key) would keep
// the operator's key, and the DaemonSet off every node, for good. The write is therefore
// unstructured: a typed apply configuration cannot say "empty".
func writeDaemonSet(ctx context.Context, c client.Client, o client.Object, w *workloadWrite) error {
	ds := o.(*appsv1.DaemonSet)
	annotations := w.annotationsFor()
	saved, hasSaved, err := savedNodeSelector(ds.Annotations)
	if err != nil {
		return err
	}
	selector := nodeSelectorFor(ds.Spec.Template.Spec.NodeSelector, saved, w.level == 0)
	if w.level == 0 {
		record := saved
		if !hasSaved {
			// Not scaled down yet, so the selector is all the DaemonSet's own.
			record = maps.Clone(ds.Spec.Template.Spec.NodeSelector)
		}
		data, err := json.Marshal(record)
		if err != nil {
			return err
		}
		if record == nil {
			data = []byte("{}")
		}
		annotations[AnnotationOriginalNodeSelector] = string(data)
	}
	gvk := appsv1.SchemeGroupVersion.WithKind("DaemonSet")
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(o.GetNamespace())
	u.SetName(o.GetName())
	u.SetUID(o.GetUID())
	u.SetResourceVersion(o.GetResourceVersion())
	u.SetAnnotations(annotations)
	nodeSelector := map[string]any{}
	for k, v := range selector {
		nodeSelector[k] = v
	}
	if err := unstructured.SetNestedMap(u.Object, nodeSelector, "spec", "template", "spec", "nodeSelector"); err != nil {
		return err
	}
	if err := apply(ctx, c, "nodeSelector to DaemonSet", client.ApplyConfigurationFromUnstructured(u)); err != nil {
		return err
	}
	return removeAnnotations(ctx, c, gvk, client.ObjectKeyFromObject(o), u.GetAnnotations(), u.GetResourceVersion(),
		ended(ds.Annotations, annotations, append(slices.Clone(recordKeys), AnnotationOriginalNodeSelector)...))
}

// nodeSelectorFor returns the nodeSelector a DaemonSet gets: its current one without
// the operator's key, plus that key for a downtime. Should the selector saved at the
// scale-down carry a key of the same name of its own, its value comes back with it.
func nodeSelectorFor(current, saved map[string]string, down bool) map[string]string {
	out := maps.Clone(current)
	delete(out, NodeSelectorScaledDown)
	if v, ok := saved[NodeSelectorScaledDown]; ok && !down {
		if out == nil {
			out = map[string]string{}
		}
		out[NodeSelectorScaledDown] = v
	}
	if down {
		if out == nil {
			out = map[string]string{}
		}
		out[NodeSelectorScaledDown] = "true"
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// nodeSelectorChanges describes how a scaled-down DaemonSet's selector, without the
// operator's key, differs from the one saved at its scale-down: empty when the key is
// all that differs.
func nodeSelectorChanges(o client.Object) string {
	ds, ok := o.(*appsv1.DaemonSet)
	if !ok {
		return ""
	}
	saved, hasSaved, err := savedNodeSelector(ds.Annotations)
	if err != nil || !hasSaved {
		return ""
	}
	now := nodeSelectorFor(ds.Spec.Template.Spec.NodeSelector, saved, false)
	if maps.Equal(now, saved) {
		return ""
	}
	data, _ := json.Marshal(now)
	if now == nil {
		data = []byte("{}")
	}
	return "its nodeSelector, changed during the downtime, is kept as it is now: " + string(data)
}

// savedNodeSelector reads AnnotationOriginalNodeSelector.
func savedNodeSelector(annotations map[string]string) (map[string]string, bool, error) {
	v, ok := annotations[AnnotationOriginalNodeSelector]
	if !ok {
		return nil, false, nil
	}
	var out map[string]string
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, true, fmt.Errorf("%s is not a JSON object of strings: %w; fix or remove it", AnnotationOriginalNodeSelector, err)
	}
	return out, true, nil
}

func slimDaemonSet(obj any) (any, error) {
	d, ok := obj.(*appsv1.DaemonSet)
	if !ok {
		return obj, nil
	}
	// The nodeSelector is kept whole: the write applies it whole.
	out := &appsv1.DaemonSet{ObjectMeta: slimMeta(d.ObjectMeta)}
	out.Spec.Template.Spec.NodeSelector = d.Spec.Template.Spec.NodeSelector
	out.Spec.Template.Spec.PriorityClassName = d.Spec.Template.Spec.PriorityClassName
	return out, nil
}

// horizontalPodAutoscalers are HPAs scheduled in their own right: only those with a
// schedule of their own (an HPA without one follows the workload it targets, see
// decide). Their level is minReplicas, which cannot go below 1.
var horizontalPodAutoscalers = &kind{
	traits:     traits{name: "HorizontalPodAutoscaler", floor: 1, ownScheduleOnly: true},
	gvk:        autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"),
	resource:   "horizontalpodautoscalers.autoscaling",
	levelField: []string{"spec", "minReplicas"},
	newObject:  func() client.Object { return &autoscalingv2.HorizontalPodAutoscaler{} },
	newList:    func() client.ObjectList { return &autoscalingv2.HorizontalPodAutoscalerList{} },
	read: fromObject(func(h *autoscalingv2.HorizontalPodAutoscaler) int32 {
		return ptr.Deref(h.Spec.MinReplicas, 1)
	}),
	// minReplicas above maxReplicas is invalid; a maxReplicas lowered during the downtime
	// caps what comes back (see restore).
	maxReplicas: func(o client.Object) int32 { return o.(*autoscalingv2.HorizontalPodAutoscaler).Spec.MaxReplicas },
	write: func(ctx context.Context, c client.Client, o client.Object, w *workloadWrite) error {
		annotations := w.annotationsFor()
		ac := autoscalingv2ac.HorizontalPodAutoscaler(o.GetName(), o.GetNamespace()).
			WithUID(o.GetUID()).WithResourceVersion(o.GetResourceVersion()).
			WithAnnotations(annotations).
			WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().WithMinReplicas(w.level))
		return applyEnding(ctx, c, fmt.Sprintf("minReplicas %d to HorizontalPodAutoscaler", w.level), ac, ac.ObjectMetaApplyConfiguration,
			autoscalingv2.SchemeGroupVersion.WithKind("HorizontalPodAutoscaler"), o, ended(o.GetAnnotations(), annotations, recordKeys...))
	},
	transform: slimHPA,
}

// priorityClassOf returns the priority class of the pods of a workload with a pod
// template (kinds scaled through /scale keep none in the cache).
func priorityClassOf(o client.Object) string {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return w.Spec.Template.Spec.PriorityClassName
	case *appsv1.StatefulSet:
		return w.Spec.Template.Spec.PriorityClassName
	case *appsv1.DaemonSet:
		return w.Spec.Template.Spec.PriorityClassName
	case *batchv1.Job:
		return w.Spec.Template.Spec.PriorityClassName
	case *batchv1.CronJob:
		return w.Spec.JobTemplate.Spec.Template.Spec.PriorityClassName
	}
	return ""
}

// builtinKinds are the kinds --scaling-resources may name besides those with a /scale
// subresource found at run time.
var builtinKinds = []*kind{deployments, statefulSets, cronJobs, jobs, daemonSets, horizontalPodAutoscalers}

// slimMeta keeps the identity, the operator's annotations and the controller reference:
// managed fields and other annotations (a kubectl last-applied configuration can be
// larger than the rest of the object) never reach the cache.
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
		Annotations:       keepAnnotations(m.Annotations, annotationPrefix),
	}
	if ref := metav1.GetControllerOfNoCopy(&m); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return out
}

// keepAnnotations returns the annotations whose keys start with one of prefixes.
func keepAnnotations(in map[string]string, prefixes ...string) map[string]string {
	var out map[string]string
	for k, v := range in {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
				break
			}
		}
	}
	return out
}

// slimNamespace keeps the labels too: the namespace exclusion selects by them.
func slimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	meta := slimMeta(ns.ObjectMeta)
	meta.Labels = ns.Labels
	return &corev1.Namespace{ObjectMeta: meta}, nil
}

// slimHPA keeps the target, the bounds and the operator's annotations: the HPA
// controller rewrites status every sync, and none of that is needed here.
func slimHPA(obj any) (any, error) {
	h, ok := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	if !ok {
		return obj, nil
	}
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: slimMeta(h.ObjectMeta),
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: h.Spec.ScaleTargetRef,
			MinReplicas:    h.Spec.MinReplicas,
			MaxReplicas:    h.Spec.MaxReplicas,
		},
	}, nil
}
