package scaling_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

var _ = Describe("Scheduled scaling's bounds", func() {
	var (
		ctx    context.Context
		clock  *stepClock
		friday time.Time
	)
	BeforeEach(func() {
		ctx = context.Background()
		friday = upcoming(time.Friday, 17, 59, 30)
		clock = newStepClock(friday)
	})

	It("rejects a holiday calendar beyond the element bound with a Warning, and decides the others at once", func() {
		ops := newNamespace(nil)
		ns := newNamespace(nil)
		// A tenant's ConfigMap of every hour for two years: about 1 MiB.
		start := friday.Add(-time.Hour).UTC()
		hours := make([]string, 19000)
		for i := range hours {
			a := start.Add(time.Duration(i) * time.Hour)
			hours[i] = a.Format(time.RFC3339) + "-" + a.Add(time.Hour).Format(time.RFC3339)
		}
		huge := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ops, Name: "every-hour", Labels: map[string]string{scaling.LabelHolidayCalendar: "true"}},
			Data:       map[string]string{"hours": strings.Join(hours, ",")},
		}
		Expect(k8s.Create(ctx, huge)).To(Succeed())
		for i := range 20 {
			newDeployment(ns, fmt.Sprintf("tenant-%d", i), 2, map[string]string{scaling.AnnotationDowntime: "holidays:every-hour"})
		}
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationUptime: workingHours})
		runOperator(scaling.Options{Clock: clock, CalendarNamespace: ops})

		Eventually(notes(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-0"}}, scaling.ReasonInvalidSchedule)).
			Should(ContainElement(Satisfy(containsAll("Warning: ", `holiday calendar "every-hour" is invalid: too many elements: 19000 (at most 1000)`))))
		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Eventually(replicas(web)).Should(BeEquivalentTo(0), "the other workloads are decided as ever")
		for i := range 20 {
			Expect(replicas(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("tenant-%d", i)}})(Default)).
				To(BeEquivalentTo(2), "an unreadable schedule scales nothing down")
		}
	})

	It("decides nothing for a workload whose Namespace it cannot read, even one excluded by name", func() {
		// A Namespace the operator's cache does not hold: removed with its finalizer
		// while its workload stays (envtest runs no namespace controller), as a new
		// Namespace is missing from the cache for a moment.
		excluded := "scaling-gone-" + strings.ToLower(rand.String(5))
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: excluded}})).To(Succeed())
		web := newDeployment(excluded, "web", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		clientset, err := kubernetes.NewForConfig(env.Config)
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: excluded}})).To(Succeed())
		Eventually(func(g Gomega) {
			ns, err := clientset.CoreV1().Namespaces().Get(ctx, excluded, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			ns.Spec.Finalizers = nil
			_, err = clientset.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			_, err = clientset.CoreV1().Namespaces().Get(ctx, excluded, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
		}).Should(Succeed())
		Expect(replicas(web)(Default)).To(BeEquivalentTo(3), "the workload outlives its Namespace")

		runOperator(scaling.Options{Clock: clock, ExcludeNamespaces: []string{excluded}})
		Consistently(replicas(web)).Should(BeEquivalentTo(3), "a Namespace that cannot be read may be excluded: nothing is decided")
	})

	It("schedules only Deployments and StatefulSets by their namespace, unless --default-scaling-kinds names more", func() {
		ns := newNamespace(map[string]string{scaling.AnnotationDowntime: "always"})
		web := newDeployment(ns, "web", 3, nil)
		db := newStatefulSet(ns, "db", 2, nil)
		agent := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"},
			Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: podTemplate("agent")},
		}
		Expect(k8s.Create(ctx, agent)).To(Succeed())
		cronSpec := batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: podTemplate("nightly").Spec.Containers}},
		}}}
		inherits := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inherits"}, Spec: cronSpec}
		own := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own", Annotations: map[string]string{scaling.AnnotationDowntime: "always"}},
			Spec: cronSpec}
		Expect(k8s.Create(ctx, inherits)).To(Succeed())
		Expect(k8s.Create(ctx, own)).To(Succeed())
		suspended := func(c *batchv1.CronJob) func(Gomega) bool {
			return func(g Gomega) bool {
				live := &batchv1.CronJob{}
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), live)).To(Succeed())
				return live.Spec.Suspend != nil && *live.Spec.Suspend
			}
		}
		scaledDown := func(g Gomega) bool {
			live := &appsv1.DaemonSet{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(agent), live)).To(Succeed())
			_, down := live.Spec.Template.Spec.NodeSelector[scaling.NodeSelectorScaledDown]
			return down
		}
		stop := runOperator(scaling.Options{Clock: clock})

		Eventually(replicas(web)).Should(BeEquivalentTo(0))
		Eventually(replicas(db)).Should(BeEquivalentTo(0))
		Eventually(suspended(own)).Should(BeTrue(), "a CronJob's own schedule still applies")
		Consistently(func(g Gomega) []bool { return []bool{suspended(inherits)(g), scaledDown(g)} }).Should(Equal([]bool{false, false}),
			"the namespace's schedule does not reach CronJobs and DaemonSets")
		stop()

		runOperator(scaling.Options{Clock: clock, DefaultKinds: []string{"deployments.apps", "statefulsets.apps", "daemonsets.apps"}})
		Eventually(scaledDown).Should(BeTrue(), "named in --default-scaling-kinds")
		Consistently(suspended(inherits)).Should(BeFalse())
	})
})
