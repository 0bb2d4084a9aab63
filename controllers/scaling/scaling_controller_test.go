package scaling_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

const workingHours = "Mon-Fri 08:00-18:00 Europe/Berlin"

var _ = Describe("Scheduled scaling", func() {
	var (
		ctx   context.Context
		clock *stepClock
		// friday is 30 seconds before the end of Friday's working hours.
		friday time.Time
	)
	BeforeEach(func() {
		ctx = context.Background()
		friday = upcoming(time.Friday, 17, 59, 30)
		clock = newStepClock(friday)
	})

	It("scales down at the downtime boundary and back up at the next, by the requeue alone", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationUptime: workingHours})
		runOperator(scaling.Options{Clock: clock})

		Consistently(replicas(web)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))
		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		monday := berlinDay(friday, 3, 8, 0)
		Eventually(replicas(web)).Should(BeEquivalentTo(0))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(Equal("3"))
		Expect(annotation(web, scaling.AnnotationNextTransition)(Default)).To(Equal(utc(monday)))
		Eventually(notes(web, scaling.ReasonScaleDown)).Should(ContainElement(ContainSubstring("scaled down from 3 to 0 replicas")))

		By("owning spec.replicas through server-side apply as " + scaling.FieldManager)
		live := &appsv1.Deployment{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(web), live)).To(Succeed())
		Expect(live.ManagedFields).To(ContainElement(SatisfyAll(
			HaveField("Manager", scaling.FieldManager),
			HaveField("Operation", metav1.ManagedFieldsOperationApply),
			HaveField("FieldsV1.Raw", WithTransform(func(b []byte) string { return string(b) }, ContainSubstring(`"f:replicas"`))),
		)))

		By("restoring at Monday 08:00, which nothing but the requeue can trigger")
		clock.JumpTo(monday)
		Eventually(replicas(web)).Should(BeEquivalentTo(3))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
		Expect(annotation(web, scaling.AnnotationNextTransition)(Default)).To(Equal(utc(berlinDay(friday, 3, 18, 0))))
		Eventually(notes(web, scaling.ReasonScaleUp)).Should(ContainElement(ContainSubstring("restored 3 replicas")))
	})

	It("meets a boundary a few seconds ahead on the real clock", func() {
		ns := newNamespace(nil)
		boundary := time.Now().Add(5 * time.Second).Truncate(time.Second)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationDowntime: "from " + boundary.Format(time.RFC3339)})
		runOperator(scaling.Options{})

		Eventually(replicas(web)).WithTimeout(30 * time.Second).Should(BeEquivalentTo(0))
		Expect(time.Now()).To(BeTemporally(">=", boundary))
	})

	It("scales StatefulSets the same way", func() {
		ns := newNamespace(nil)
		db := newStatefulSet(ns, "db", 2, map[string]string{scaling.AnnotationUptime: workingHours})
		runOperator(scaling.Options{Clock: clock})

		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Eventually(replicas(db)).Should(BeEquivalentTo(0))
		Expect(annotation(db, scaling.AnnotationOriginalReplicas)(Default)).To(Equal("2"))
		clock.JumpTo(berlinDay(friday, 3, 8, 0))
		Eventually(replicas(db)).Should(BeEquivalentTo(2))
	})

	It("keeps a manual scale during downtime until the next boundary and then restores the saved count", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationUptime: workingHours})
		runOperator(scaling.Options{Clock: clock})
		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Eventually(replicas(web)).Should(BeEquivalentTo(0))

		update(web, setReplicas(2))
		Eventually(notes(web, scaling.ReasonManualOverride)).Should(ContainElement(ContainSubstring("changed to 2")))
		Consistently(replicas(web)).Should(BeEquivalentTo(2))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(Equal("3"), "the saved count must survive a manual scale")

		clock.JumpTo(berlinDay(friday, 3, 8, 0))
		Eventually(replicas(web)).Should(BeEquivalentTo(3))
	})

	It("restores the saved count correctly after an operator restart during downtime, and catches up on what it missed", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationUptime: workingHours})
		clock.JumpTo(berlinDay(friday, 0, 19, 0))

		By("starting in the middle of a downtime the operator did not see begin")
		stop := runOperator(scaling.Options{Clock: clock})
		Eventually(replicas(web)).Should(BeEquivalentTo(0))
		stop()

		By("restarting after the uptime began while it was down")
		clock.JumpTo(berlinDay(friday, 3, 9, 0))
		Consistently(replicas(web)).WithTimeout(time.Second).Should(BeEquivalentTo(0))
		runOperator(scaling.Options{Clock: clock})
		Eventually(replicas(web)).Should(BeEquivalentTo(3))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
	})

	It("leaves workloads controlled by another controller alone and says why", func() {
		ns := newNamespace(map[string]string{scaling.AnnotationDowntime: "always"})
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}
		Expect(k8s.Create(ctx, owner)).To(Succeed())
		owned := &appsv1.Deployment{}
		*owned = *newDeployment(ns, "owned", 3, nil)
		update(owned, func(o client.Object) {
			o.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID, Controller: ptr.To(true)}})
		})
		free := newDeployment(ns, "free", 3, nil)
		runOperator(scaling.Options{Clock: clock})

		Eventually(replicas(free)).Should(BeEquivalentTo(0))
		Eventually(notes(owned, scaling.ReasonControlledByOwner)).Should(ContainElement(ContainSubstring("controlled by ConfigMap owner")))
		Consistently(replicas(owned)).Should(BeEquivalentTo(3))
	})

	It("lowers an autoscaler's minReplicas for a non-zero downtime count and restores it, without touching the replicas", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 4, map[string]string{scaling.AnnotationUptime: workingHours, scaling.AnnotationDowntimeReplicas: "1"})
		hpa := newHPA(ns, "web", "web", 3)
		runOperator(scaling.Options{Clock: clock})

		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Eventually(minReplicas(hpa)).Should(BeEquivalentTo(1))
		Expect(annotation(hpa, scaling.AnnotationOriginalMinReplicas)(Default)).To(Equal("3"))
		Consistently(replicas(web)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(4))

		clock.JumpTo(berlinDay(friday, 3, 8, 0))
		Eventually(minReplicas(hpa)).Should(BeEquivalentTo(3))
		Expect(annotation(hpa, scaling.AnnotationOriginalMinReplicas)(Default)).To(BeEmpty())
		Expect(replicas(web)(Default)).To(BeEquivalentTo(4))
	})

	It("scales an autoscaled workload to zero for a zero downtime count, leaving the autoscaler as it is", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 4, map[string]string{scaling.AnnotationUptime: workingHours})
		hpa := newHPA(ns, "web", "web", 3)
		runOperator(scaling.Options{Clock: clock})

		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Eventually(replicas(web)).Should(BeEquivalentTo(0))
		Expect(minReplicas(hpa)(Default)).To(BeEquivalentTo(3))
		Expect(annotation(hpa, scaling.AnnotationOriginalMinReplicas)(Default)).To(BeEmpty())
		clock.JumpTo(berlinDay(friday, 3, 8, 0))
		Eventually(replicas(web)).Should(BeEquivalentTo(4))
	})

	It("takes a namespace's annotations as defaults, lets a workload's group replace them, and follows changes to them", func() {
		ns := newNamespace(map[string]string{scaling.AnnotationUptime: workingHours, scaling.AnnotationDowntimeReplicas: "1"})
		inherits := newDeployment(ns, "inherits", 3, nil)
		own := newDeployment(ns, "own", 3, map[string]string{scaling.AnnotationDowntime: "Sat-Sun 00:00-24:00 Europe/Berlin"})
		runOperator(scaling.Options{Clock: clock})

		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Eventually(replicas(inherits)).Should(BeEquivalentTo(1))
		Consistently(replicas(own)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))

		By("scaling the workload with its own group by its own schedule and count")
		clock.JumpTo(berlinDay(friday, 1, 0, 0))
		Eventually(replicas(own)).Should(BeEquivalentTo(0))

		By("re-deciding the namespace's workloads when its defaults change")
		update(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, func(o client.Object) {
			a := o.GetAnnotations()
			a[scaling.AnnotationUptime] = "always"
			o.SetAnnotations(a)
		})
		Eventually(replicas(inherits)).Should(BeEquivalentTo(3))
	})

	It("holds off a workload until exclude-until passes, then scales it", func() {
		ns := newNamespace(nil)
		until := berlinDay(friday, 0, 20, 0)
		web := newDeployment(ns, "web", 3, map[string]string{
			scaling.AnnotationUptime: workingHours, scaling.AnnotationExcludeUntil: until.Format(time.RFC3339),
		})
		runOperator(scaling.Options{Clock: clock})
		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Consistently(replicas(web)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))

		clock.JumpTo(until)
		Eventually(replicas(web)).Should(BeEquivalentTo(0))
	})

	It("reports a malformed schedule with a warning naming the element and reason, and scales the others", func() {
		ns := newNamespace(nil)
		bad := newDeployment(ns, "bad", 3, map[string]string{scaling.AnnotationDowntime: "always, Mon-Fry 08:00-18:00 Europe/Berlin"})
		good := newDeployment(ns, "good", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		runOperator(scaling.Options{Clock: clock})

		Eventually(replicas(good)).Should(BeEquivalentTo(0))
		Eventually(notes(bad, scaling.ReasonInvalidSchedule)).Should(ContainElement(Satisfy(containsAll(
			"Warning: ", scaling.AnnotationDowntime, `element 2 "Mon-Fry 08:00-18:00 Europe/Berlin"`, `unknown weekday "Fry"`))))
		Consistently(replicas(bad)).Should(BeEquivalentTo(3))
	})

	It("gives a new workload the grace period before its first scale-down", func() {
		now := time.Now()
		clock = newStepClock(now)
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		runOperator(scaling.Options{Clock: clock, GracePeriod: 15 * time.Minute})

		Eventually(notes(web, scaling.ReasonGracePeriod)).Should(HaveLen(1))
		Consistently(replicas(web)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))
		clock.JumpTo(now.Add(15*time.Minute + time.Second))
		Eventually(replicas(web)).Should(BeEquivalentTo(0))
	})

	It("writes nothing in dry-run mode but records what it would do", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		runOperator(scaling.Options{Clock: clock, DryRun: true})

		Eventually(notes(web, scaling.ReasonScaleDown)).Should(ContainElement(ContainSubstring("dry run, nothing written: scaled down from 3 to 0")))
		Consistently(replicas(web)).Should(BeEquivalentTo(3))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
	})

	It("restores the saved count when the schedule is removed, keeping spec.replicas set", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		runOperator(scaling.Options{Clock: clock})
		Eventually(replicas(web)).Should(BeEquivalentTo(0))

		update(web, func(o client.Object) {
			a := o.GetAnnotations()
			delete(a, scaling.AnnotationDowntime)
			o.SetAnnotations(a)
		})
		Eventually(replicas(web)).Should(BeEquivalentTo(3))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
		Expect(annotation(web, scaling.AnnotationNextTransition)(Default)).To(BeEmpty())
	})

	It("is not undone by a GitOps server-side apply that leaves spec.replicas to it", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		gitops := func() {
			ac := appsv1ac.Deployment("web", ns).
				WithAnnotations(map[string]string{scaling.AnnotationDowntime: "always"}).
				WithSpec(appsv1ac.DeploymentSpec().
					WithSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{"app": "web"})).
					WithTemplate(corev1ac.PodTemplateSpec().
						WithLabels(map[string]string{"app": "web"}).
						WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("app").WithImage("registry.k8s.io/pause:3.10")))))
			Expect(k8s.Apply(ctx, ac, client.FieldOwner("gitops"), client.ForceOwnership)).To(Succeed())
		}
		gitops()
		runOperator(scaling.Options{Clock: clock})
		Eventually(replicas(web)).Should(BeEquivalentTo(0))

		gitops()
		Consistently(replicas(web)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(0))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(Equal("3"))
	})
})

func newHPA(ns, name, target string, min int32) *autoscalingv2.HorizontalPodAutoscaler {
	h := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: target},
			MinReplicas:    ptr.To(min),
			MaxReplicas:    10,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To[int32](80)},
				},
			}},
		},
	}
	Expect(k8s.Create(context.Background(), h)).To(Succeed())
	return h
}

func minReplicas(h *autoscalingv2.HorizontalPodAutoscaler) func(Gomega) int32 {
	return func(g Gomega) int32 {
		live := &autoscalingv2.HorizontalPodAutoscaler{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(h), live)).To(Succeed())
		return ptr.Deref(live.Spec.MinReplicas, 1)
	}
}
