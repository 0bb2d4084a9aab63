package scaling

import (
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// What a downtime saves is counted for kinds with a replica count (Deployments,
// StatefulSets, kinds scaled through /scale): the replicas held below the saved count,
// and for Deployments and StatefulSets what one pod of their template requested at the
// scale-down, recorded on the workload (AnnotationPodRequests) so that a restart, or a
// template changed during the downtime, does not change the count.

// savings is what one workload saves while the operator holds it down.
type savings struct {
	// replicas held below the saved count now.
	replicas int32
	// perPod is what one pod requests: CPU in millicores, memory in bytes.
	cpuMilli, memoryBytes int64
	// since is when the workload was scaled down, as recorded on it.
	since time.Time
}

// countsReplicas reports whether a kind's level is a replica count whose savings are
// counted: not kinds that run or stop, and not an autoscaler's minReplicas (the
// autoscaler, not the operator, sets the replicas then).
func countsReplicas(k traits) bool { return !k.onOff && k.floor == 0 }

// podRequests returns the CPU and memory one pod of a template requests, as the
// scheduler counts them (init and sidecar containers, pod-level resources, overhead).
func podRequests(template *corev1.PodTemplateSpec) corev1.ResourceList {
	all := resourcehelper.PodRequests(&corev1.Pod{Spec: template.Spec}, resourcehelper.PodResourcesOptions{})
	out := corev1.ResourceList{}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := all[name]; ok && !q.IsZero() {
			out[name] = q
		}
	}
	return out
}

// slimTemplateAnnotations keeps a template's pod requests where a slimmed workload
// holds them: as AnnotationPodRequests records them, the one annotation of an otherwise
// empty template. A string in a map of one costs a third of a ResourceList of two
// quantities, and every Deployment and StatefulSet of the cluster is cached.
func slimTemplateAnnotations(template *corev1.PodTemplateSpec) map[string]string {
	r := formatRequests(podRequests(template))
	if r == "" {
		return nil
	}
	return map[string]string{AnnotationPodRequests: r}
}

// templateRequests returns the pod requests a slimmed (or whole) workload holds, as
// AnnotationPodRequests records them.
func templateRequests(o any) string {
	var t *corev1.PodTemplateSpec
	switch w := o.(type) {
	case *appsv1.Deployment:
		t = &w.Spec.Template
	case *appsv1.StatefulSet:
		t = &w.Spec.Template
	default:
		return ""
	}
	if len(t.Spec.Containers) == 0 {
		return t.Annotations[AnnotationPodRequests]
	}
	return formatRequests(podRequests(t))
}

// formatRequests writes requests as AnnotationPodRequests holds them.
func formatRequests(r corev1.ResourceList) string {
	var parts []string
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := r[name]; ok && !q.IsZero() {
			parts = append(parts, string(name)+"="+q.String())
		}
	}
	return strings.Join(parts, ",")
}

// parseRequests reads AnnotationPodRequests; what it cannot read counts as nothing.
func parseRequests(v string) (cpuMilli, memoryBytes int64) {
	for _, part := range strings.Split(v, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(value))
		if err != nil || q.Sign() < 0 {
			continue
		}
		switch corev1.ResourceName(strings.TrimSpace(name)) {
		case corev1.ResourceCPU:
			cpuMilli = q.MilliValue()
		case corev1.ResourceMemory:
			memoryBytes = q.Value()
		}
	}
	return cpuMilli, memoryBytes
}

// downtimeRecord is what a scale-down writes besides the saved count: when, and what a
// pod requested. A workload already scaled down keeps what was recorded then.
func downtimeRecord(in inputs) (since time.Time, requests string) {
	if !countsReplicas(in.kind) {
		return time.Time{}, ""
	}
	a := in.workload.annotations
	_, hasSaved := a[AnnotationOriginalReplicas]
	since, err := time.Parse(time.RFC3339, a[AnnotationScaledDownAt])
	if !hasSaved || err != nil {
		since = in.now
	}
	requests, recorded := a[AnnotationPodRequests]
	if !hasSaved || !recorded {
		requests = in.workload.podRequests
	}
	return since, requests
}

// savingsOf returns what a workload saves once the decision is carried out.
func savingsOf(in inputs, d decision) savings {
	if !countsReplicas(in.kind) || slices.Contains([]state{stateUnmanaged, stateOwned}, d.state) {
		return savings{}
	}
	a := in.workload.annotations
	level := in.workload.level
	saved, hasSaved, err := savedCount(a, AnnotationOriginalReplicas)
	if hasSaved && err != nil {
		return savings{}
	}
	since, _ := time.Parse(time.RFC3339, a[AnnotationScaledDownAt])
	requests := a[AnnotationPodRequests]
	if w := d.workload; w != nil {
		if w.original == nil {
			return savings{} // restored
		}
		level, saved, hasSaved = w.level, *w.original, true
		since, requests = w.since, w.podRequests
	}
	if !hasSaved || level >= saved {
		return savings{}
	}
	if since.IsZero() {
		since = in.now
	}
	s := savings{replicas: saved - level, since: since}
	s.cpuMilli, s.memoryBytes = parseRequests(requests)
	return s
}
