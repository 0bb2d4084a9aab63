package realnode_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	phalanksv1alpha1 "github.com/phalanks/phalanks-operator/api/v1alpha1"
	"github.com/phalanks/phalanks-operator/controllers/scaling"
	"github.com/phalanks/phalanks-operator/test/harness/images"
)

func fooSpecs() bool {
	return Describe("Foo, as sample-controller's users run it", Ordered, func() {
		const ns = "team-web"
		BeforeAll(func() {
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		})

		var foo *phalanksv1alpha1.Foo
		It("runs the pods of its Deployment and counts the Ready ones as available", func() {
			foo = &phalanksv1alpha1.Foo{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
				Spec:       phalanksv1alpha1.FooSpec{DeploymentName: "web", Replicas: ptr.To[int32](2), Image: testApp},
			}
			Expect(k8s.Create(ctx, foo)).To(Succeed())
			expectFooPods(foo, 2)
		})

		It("scales its pods up and down with spec.replicas", func() {
			for _, replicas := range []int32{4, 1} {
				By(fmt.Sprintf("setting replicas to %d", replicas))
				patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))
				Expect(k8s.Patch(ctx, foo, patch)).To(Succeed())
				expectFooPods(foo, replicas)
			}
		})
	})
}

// expectFooPods waits until the Foo's Deployment has exactly want pods, all Running and
// Ready (terminated ones gone), and the Foo reports them available.
func expectFooPods(foo *phalanksv1alpha1.Foo, want int32) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		all, ready := countPods(g, foo.Namespace, map[string]string{"controller": foo.Name})
		g.Expect(all).To(BeEquivalentTo(want), "pods of Foo %s: %s", foo.Name, podsSummary(foo.Namespace))
		g.Expect(ready).To(BeEquivalentTo(want), "Ready pods of Foo %s: %s", foo.Name, podsSummary(foo.Namespace))
		live := &phalanksv1alpha1.Foo{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foo), live)).To(Succeed())
		g.Expect(live.Status.AvailableReplicas).To(Equal(want), "Foo %s status %+v", foo.Name, live.Status)
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// countPods counts the pods matching labels: all of them, terminating ones included, and
// the Running and Ready ones that are not terminating.
func countPods(g Gomega, namespace string, labels map[string]string) (all, ready int) {
	pods := &corev1.PodList{}
	g.Expect(k8s.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(labels))).To(Succeed())
	for _, p := range pods.Items {
		all++
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
			ready++
		}
	}
	return all, ready
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func scalingSpecs() bool {
	return Describe("scheduled scaling", Ordered, func() {
		const ns = "team-office"
		// The downtime window opens once both workloads' pods are Ready and lasts long enough
		// for the operator's pod to be replaced inside it.
		const (
			downtimeLead   = 40 * time.Second
			downtimeLength = 80 * time.Second
		)
		var (
			web    *appsv1.Deployment
			ledger *appsv1.StatefulSet
			start  time.Time
			end    time.Time
		)
		BeforeAll(func() {
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
			start = time.Now().Add(downtimeLead).Truncate(time.Second)
			end = start.Add(downtimeLength)
			window := map[string]string{scaling.AnnotationDowntime: start.UTC().Format(time.RFC3339) + "-" + end.UTC().Format(time.RFC3339)}
			web = &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Annotations: window},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](3),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Template: podTemplate("web"),
				},
			}
			ledger = &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{Name: "ledger", Namespace: ns, Annotations: window},
				Spec: appsv1.StatefulSetSpec{
					Replicas:    ptr.To[int32](2),
					ServiceName: "ledger",
					Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ledger"}},
					Template:    podTemplate("ledger"),
				},
			}
			Expect(k8s.Create(ctx, web)).To(Succeed())
			Expect(k8s.Create(ctx, ledger)).To(Succeed())
		})

		It("runs the annotated Deployment's and StatefulSet's pods until the downtime starts", func() {
			expectPods(ns, "web", 3)
			expectPods(ns, "ledger", 2)
			Expect(time.Now()).To(BeTemporally("<", start), "the pods took longer than the downtime's lead to start; lengthen downtimeLead")
		})

		It("terminates their pods at the downtime boundary and records the replica counts", func() {
			expectPods(ns, "web", 0)
			expectPods(ns, "ledger", 0)
			Expect(time.Now()).To(BeTemporally(">=", start), "scaled down before the downtime started")
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(web), web)).To(Succeed())
			Expect(web.Annotations).To(HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "3"))
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ledger), ledger)).To(Succeed())
			Expect(ledger.Annotations).To(HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "2"))
		})

		It("keeps the original counts across a restart of the leading operator pod in the downtime", func() {
			old := leaderPod()
			Expect(k8s.Delete(ctx, old)).To(Succeed())
			Eventually(func(g Gomega) {
				for _, p := range operatorPods() {
					g.Expect(p.UID).NotTo(Equal(old.UID))
					g.Expect(podReady(&p)).To(BeTrue(), podsSummary(operatorNamespace))
				}
			}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
			Expect(time.Now()).To(BeTemporally("<", end), "the operator's pod came back after the downtime; lengthen downtimeLength")
			for _, obj := range []client.Object{web, ledger} {
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			}
			Expect(web.Spec.Replicas).To(HaveValue(BeZero()))
			Expect(web.Annotations).To(HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "3"))
			Expect(ledger.Annotations).To(HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "2"))
		})

		It("brings the pods back, Ready, when the downtime ends", func() {
			expectPods(ns, "web", 3)
			expectPods(ns, "ledger", 2)
			Expect(time.Now()).To(BeTemporally(">=", end), "scaled up before the downtime ended")
			for _, obj := range []client.Object{web, ledger} {
				Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
				Expect(obj.GetAnnotations()).NotTo(HaveKey(scaling.AnnotationOriginalReplicas))
			}
			Expect(web.Spec.Replicas).To(HaveValue(BeEquivalentTo(3)))
			Expect(ledger.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
		})
	})
}

// expectPods waits until exactly want pods labelled app=name exist, all Running and
// Ready (with want 0: until every pod has gone).
func expectPods(namespace, name string, want int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		alive()
		all, ready := countPods(g, namespace, map[string]string{"app": name})
		g.Expect(all).To(Equal(want), "pods of %s: %s", name, podsSummary(namespace))
		g.Expect(ready).To(Equal(want), "Ready pods of %s: %s", name, podsSummary(namespace))
	}).WithTimeout(podTimeout).WithPolling(poll).Should(Succeed())
}

// podTemplate runs testapp with a readiness probe, under restricted Pod Security.
func podTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "app",
				Image: testApp,
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(images.TestAppPort)}},
					PeriodSeconds: 1,
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}
