package scaling_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

func newHPA(t *testing.T, ns, name, target string, minReplicas int32, annotations map[string]string) *autoscalingv2.HorizontalPodAutoscaler {
	t.Helper()
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    ptr.To(minReplicas),
			MaxReplicas:    5,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
				},
			}},
		},
	}
	expect(t).Expect(admin.Create(context.Background(), h)).To(Succeed())
	return h
}

func scalingActive(g Gomega, hpa *autoscalingv2.HorizontalPodAutoscaler) string {
	for _, c := range live(hpa)(g).Status.Conditions {
		if c.Type == autoscalingv2.ScalingActive {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return ""
}

// TestAnAutoscalerPausesWhileItsTargetIsScaledToZero scales an autoscaled Deployment
// to zero for a downtime and checks that kube-controller-manager's HPA controller
// reports scaling disabled and leaves the count at zero, then resumes after the
// restore: the operator and the autoscaler do not fight.
func TestAnAutoscalerPausesWhileItsTargetIsScaledToZero(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	web := newDeployment(t, ns, "web", 3, nil)
	hpa := newHPA(t, ns, "web", "web", 2, nil)
	replicas := func(g Gomega) int32 { return ptr.Deref(live(web)(g).Spec.Replicas, -1) }
	active := func(g Gomega) string { return scalingActive(g, hpa) }

	// The autoscaler has looked at its target (there is no metrics API here, so it
	// cannot compute a count, but it is active).
	g.Eventually(active).WithTimeout(timeout).ShouldNot(BeEmpty())
	g.Expect(active(g)).NotTo(Equal("False/ScalingDisabled"))

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: "always"})
	g.Eventually(replicas).WithTimeout(timeout).Should(BeEquivalentTo(0))
	g.Eventually(active).WithTimeout(timeout).WithPolling(time.Second).Should(Equal("False/ScalingDisabled"))
	g.Consistently(replicas).WithTimeout(5*time.Second).WithPolling(time.Second).Should(BeEquivalentTo(0),
		"the autoscaler must not scale a paused target back up")
	g.Expect(live(hpa)(g).Spec.MinReplicas).To(Equal(ptr.To[int32](2)), "the autoscaler itself is not touched")

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(replicas).WithTimeout(timeout).Should(BeEquivalentTo(3))
	g.Eventually(active).WithTimeout(timeout).WithPolling(time.Second).ShouldNot(Equal("False/ScalingDisabled"))
}

// TestAnAutoscalerWithItsOwnScheduleHasItsMinReplicasLowered schedules an HPA itself:
// its minReplicas goes to the downtime count (at least 1) and comes back exactly, with
// next-transition on it, while the real HPA controller runs it.
func TestAnAutoscalerWithItsOwnScheduleHasItsMinReplicasLowered(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	web := newDeployment(t, ns, "web", 4, nil)
	hpa := newHPA(t, ns, "web", "web", 4, nil)
	spec, next := downtimeForAnHour()

	annotate(g, hpa, map[string]string{scaling.AnnotationDowntime: spec})
	g.Eventually(func(g Gomega) *autoscalingv2.HorizontalPodAutoscaler { return live(hpa)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinReplicas", HaveValue(BeEquivalentTo(1))),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "4")),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, next)),
	), "minReplicas cannot go below 1, whatever downtime-replicas says")
	g.Expect(writtenBy(scaling.FieldManager)(live(web)(g))).To(BeFalse(), "the target is the autoscaler's to scale")

	annotate(g, hpa, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(func(g Gomega) *autoscalingv2.HorizontalPodAutoscaler { return live(hpa)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinReplicas", HaveValue(BeEquivalentTo(4))),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalReplicas))),
	))
}

// TestAnAutoscalerControlledByAnotherObjectIsNeverWritten: an HPA with a controller
// owner reference belongs to that owner (KEDA's keda-hpa-*, say). With a non-zero
// downtime count, which would go through the autoscaler, the workload is reported and
// not scaled, and the HPA is never written.
func TestAnAutoscalerControlledByAnotherObjectIsNeverWritten(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "autoscaling-operator"}}
	g.Expect(admin.Create(context.Background(), owner)).To(Succeed())
	startOperator(t, scaling.Options{})
	web := newDeployment(t, ns, "web", 4, nil)
	hpa := newHPA(t, ns, "web", "web", 3, nil)
	// The HPA controller writes the HPA's status meanwhile: update the live object.
	g.Eventually(func(g Gomega) error {
		h := live(hpa)(g)
		h.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		return admin.Update(context.Background(), h)
	}).WithTimeout(timeout).Should(Succeed())

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: "always", scaling.AnnotationDowntimeReplicas: "1"})
	g.Eventually(notes(web, scaling.ReasonAutoscalerNotWritable)).WithTimeout(timeout).Should(ContainElement(
		ContainSubstring("HorizontalPodAutoscaler web is controlled by ConfigMap autoscaling-operator")))
	g.Consistently(func(g Gomega) bool { return writtenBy(scaling.FieldManager)(live(hpa)(g)) }).
		WithTimeout(5 * time.Second).WithPolling(time.Second).Should(BeFalse())
	g.Expect(live(web)(g).Spec.Replicas).To(HaveValue(BeEquivalentTo(4)))

	// A zero downtime count scales the workload instead, which pauses the autoscaler
	// without writing it.
	annotate(g, web, map[string]string{scaling.AnnotationDowntimeReplicas: ""})
	g.Eventually(func(g Gomega) *appsv1.Deployment { return live(web)(g) }).WithTimeout(timeout).
		Should(HaveField("Spec.Replicas", HaveValue(BeEquivalentTo(0))))
	g.Expect(writtenBy(scaling.FieldManager)(live(hpa)(g))).To(BeFalse())
}

// TestAnAutoscalersMinReplicasComesBackCappedAtAMaxReplicasLoweredDuringTheDowntime
// lowers a workload's autoscaler for a non-zero downtime count, then lowers the
// autoscaler's maxReplicas below the saved minimum while it is down: the API server
// would refuse the saved minimum, so the restore writes maxReplicas instead and the
// record goes.
func TestAnAutoscalersMinReplicasComesBackCappedAtAMaxReplicasLoweredDuringTheDowntime(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	web := newDeployment(t, ns, "web", 4, nil)
	hpa := newHPA(t, ns, "web", "web", 3, nil)
	spec, _ := downtimeForAnHour()

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: spec, scaling.AnnotationDowntimeReplicas: "1"})
	g.Eventually(func(g Gomega) *autoscalingv2.HorizontalPodAutoscaler { return live(hpa)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinReplicas", HaveValue(BeEquivalentTo(1))),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalMinReplicas, "3")),
	))
	g.Eventually(func(g Gomega) error {
		h := live(hpa)(g)
		h.Spec.MaxReplicas = 2
		return admin.Update(context.Background(), h)
	}).WithTimeout(timeout).Should(Succeed())

	annotate(g, web, map[string]string{scaling.AnnotationDowntime: "", scaling.AnnotationDowntimeReplicas: ""})
	g.Eventually(func(g Gomega) *autoscalingv2.HorizontalPodAutoscaler { return live(hpa)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinReplicas", HaveValue(BeEquivalentTo(2))),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalMinReplicas))),
	))
	g.Eventually(notes(web, scaling.ReasonScaleUp)).WithTimeout(timeout).Should(ContainElement(
		ContainSubstring("restored minReplicas 2 (the saved 3, capped at maxReplicas 2)")))
}

// TestAnAutoscalerWithItsOwnScheduleComesBackCappedAtAMaxReplicasLoweredDuringTheDowntime
// schedules an HPA itself, then lowers its maxReplicas below the saved minReplicas while
// it is down: the API server would refuse the saved minimum, so the restore writes
// maxReplicas, the record goes, and the ScaleUp event names the value written.
func TestAnAutoscalerWithItsOwnScheduleComesBackCappedAtAMaxReplicasLoweredDuringTheDowntime(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	newDeployment(t, ns, "web", 4, nil)
	hpa := newHPA(t, ns, "web", "web", 4, nil)
	spec, _ := downtimeForAnHour()

	annotate(g, hpa, map[string]string{scaling.AnnotationDowntime: spec})
	g.Eventually(func(g Gomega) *autoscalingv2.HorizontalPodAutoscaler { return live(hpa)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinReplicas", HaveValue(BeEquivalentTo(1))),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "4")),
	))
	// The HPA controller writes the HPA's status meanwhile: update the live object.
	g.Eventually(func(g Gomega) error {
		h := live(hpa)(g)
		h.Spec.MaxReplicas = 2
		return admin.Update(context.Background(), h)
	}).WithTimeout(timeout).Should(Succeed())

	annotate(g, hpa, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(func(g Gomega) *autoscalingv2.HorizontalPodAutoscaler { return live(hpa)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.MinReplicas", HaveValue(BeEquivalentTo(2))),
		HaveField("Spec.MaxReplicas", BeEquivalentTo(2)),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalReplicas))),
	))
	g.Eventually(notes(hpa, scaling.ReasonScaleUp)).WithTimeout(timeout).Should(ContainElement(
		ContainSubstring("restored minReplicas from 1 to 2 (the saved 4, capped at maxReplicas 2)")))
	g.Expect(notes(hpa, scaling.ReasonScaleUp)(g)).NotTo(ContainElement(ContainSubstring("restored 4")),
		"no event claims the saved count came back")
}
