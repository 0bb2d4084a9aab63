package scaling_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

var _ = Describe("Scheduled scaling policy", func() {
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

	It("scales every workload by the operator's default schedule, except in excluded namespaces", func() {
		plain := newNamespace(nil)
		byName := newNamespace(nil)
		byLabel := newNamespace(nil)
		update(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: byLabel}}, func(o client.Object) {
			o.SetLabels(map[string]string{"environment": "production"})
		})
		own := newNamespace(map[string]string{scaling.AnnotationUptime: "always"})
		web := newDeployment(plain, "web", 3, nil)
		// A downtime count of 1 goes through the autoscaler of an autoscaled workload.
		api := newDeployment(plain, "api", 4, nil)
		hpa := newHPA(plain, "api", "api", 3)
		kept := newDeployment(byName, "web", 3, nil)
		prod := newDeployment(byLabel, "web", 3, nil)
		alwaysUp := newDeployment(own, "web", 3, nil)
		system := newDeployment("kube-system", "phalanks-policy-test", 2, nil)
		DeferCleanup(func() { Expect(k8s.Delete(context.Background(), system)).To(Succeed()) })
		runOperator(scaling.Options{
			Clock:         clock,
			DefaultUptime: workingHours, DefaultDowntimeReplicas: 1,
			ExcludeNamespaces:        []string{"kube-system", byName},
			ExcludeNamespaceSelector: "environment=production",
		})

		Consistently(replicas(web)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))
		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Eventually(replicas(web)).Should(BeEquivalentTo(1))
		Expect(annotation(web, scaling.AnnotationNextTransition)(Default)).To(Equal(utc(berlinDay(friday, 3, 8, 0))))
		Eventually(minReplicas(hpa)).Should(BeEquivalentTo(1))
		Expect(replicas(api)(Default)).To(BeEquivalentTo(4))
		Consistently(func(g Gomega) []int32 {
			return []int32{replicas(kept)(g), replicas(prod)(g), replicas(alwaysUp)(g), replicas(system)(g)}
		}).WithTimeout(3*time.Second).Should(Equal([]int32{3, 3, 3, 2}),
			"excluded by name, by label and kube-system are left alone; a namespace's own schedule wins over the defaults")

		By("restoring what was scaled, and the autoscaler it lowered, once its namespace is excluded")
		update(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: plain}}, func(o client.Object) {
			o.SetLabels(map[string]string{"environment": "production"})
		})
		Eventually(replicas(web)).Should(BeEquivalentTo(3))
		Expect(annotation(web, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
		Eventually(minReplicas(hpa)).Should(BeEquivalentTo(3))
		Expect(annotation(hpa, scaling.AnnotationOriginalMinReplicas)(Default)).To(BeEmpty())
	})

	It("applies a reconfiguration while it runs: new defaults and exclusions re-decide every workload, an invalid one changes nothing", func() {
		a, b := newNamespace(nil), newNamespace(nil)
		webA := newDeployment(a, "web", 3, nil)
		webB := newDeployment(b, "web", 2, nil)
		// Saturday: outside the working hours, a workload with them is down.
		clock.JumpTo(berlinDay(friday, 1, 12, 0))
		sc, _ := startOperator(scaling.Options{Clock: clock})
		both := func(g Gomega) []int32 { return []int32{replicas(webA)(g), replicas(webB)(g)} }
		Consistently(both).WithTimeout(2*time.Second).Should(Equal([]int32{3, 2}), "no schedule yet")

		By("scaling both down by default working hours given while it runs, with no event of theirs")
		Expect(sc.Reconfigure(scaling.Options{Concurrency: 2, DefaultUptime: workingHours})).To(Succeed())
		Eventually(both).Should(Equal([]int32{0, 0}))
		Expect(annotation(webB, scaling.AnnotationOriginalReplicas)(Default)).To(Equal("2"))

		By("restoring the one whose namespace is excluded now")
		Expect(sc.Reconfigure(scaling.Options{Concurrency: 2, DefaultUptime: workingHours, ExcludeNamespaces: []string{a}})).To(Succeed())
		Eventually(replicas(webA)).Should(BeEquivalentTo(3))
		Expect(annotation(webA, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
		Consistently(replicas(webB)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(0))

		By("refusing an invalid configuration and keeping the one in force")
		Expect(sc.Reconfigure(scaling.Options{Concurrency: 2, DefaultUptime: "Mon-Fri 08:00-18:00 Mars/Olympus"})).
			To(MatchError(ContainSubstring("--default-uptime")))
		Expect(sc.Reconfigure(scaling.Options{Concurrency: 2, ExcludeNamespaces: []string{"[kube-*"}})).
			To(MatchError(ContainSubstring("--scaling-exclude-namespaces")))
		Expect(sc.Reconfigure(scaling.Options{DefaultUptime: workingHours})).
			To(MatchError(ContainSubstring("--scaling-concurrency")))
		Consistently(both).WithTimeout(2 * time.Second).Should(Equal([]int32{3, 0}))

		By("restoring the saved count once the defaults are gone")
		Expect(sc.Reconfigure(scaling.Options{Concurrency: 2, ExcludeNamespaces: []string{a}})).To(Succeed())
		Eventually(replicas(webB)).Should(BeEquivalentTo(2))
		Expect(annotation(webB, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
	})

	It("follows force-downtime and force-uptime, on the workload and from its namespace", func() {
		ns := newNamespace(map[string]string{scaling.AnnotationForceDowntime: "true"})
		inherits := newDeployment(ns, "inherits", 3, map[string]string{scaling.AnnotationUptime: workingHours})
		forcedUp := newDeployment(ns, "forced-up", 3, map[string]string{scaling.AnnotationUptime: workingHours, scaling.AnnotationForceUptime: "true"})
		other := newNamespace(nil)
		window := newDeployment(other, "window", 3, map[string]string{
			scaling.AnnotationUptime: workingHours, scaling.AnnotationForceUptime: "Fri 18:00-20:00 Europe/Berlin",
		})
		runOperator(scaling.Options{Clock: clock})

		Eventually(replicas(inherits)).Should(BeEquivalentTo(0), "the namespace forces a downtime in working hours")
		Eventually(notes(inherits, scaling.ReasonScaleDown)).Should(ContainElement(ContainSubstring("(no end scheduled)")))
		Consistently(replicas(forcedUp)).WithTimeout(2*time.Second).Should(BeEquivalentTo(3), "force-uptime wins over force-downtime")

		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		Consistently(replicas(window)).WithTimeout(2*time.Second).Should(BeEquivalentTo(3), "forced up 18:00-20:00")
		clock.JumpTo(berlinDay(friday, 0, 20, 0))
		Eventually(replicas(window)).Should(BeEquivalentTo(0))
		Expect(annotation(window, scaling.AnnotationNextTransition)(Default)).To(Equal(utc(berlinDay(friday, 3, 8, 0))))

		update(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, func(o client.Object) {
			a := o.GetAnnotations()
			delete(a, scaling.AnnotationForceDowntime)
			o.SetAnnotations(a)
		})
		Consistently(replicas(inherits)).WithTimeout(2*time.Second).Should(BeEquivalentTo(0), "Friday night is downtime anyway")
		clock.JumpTo(berlinDay(friday, 3, 8, 0))
		Eventually(replicas(inherits)).Should(BeEquivalentTo(3))
	})

	It("takes a workload's own grace period over the operator's", func() {
		now := time.Now()
		clock = newStepClock(now)
		ns := newNamespace(nil)
		short := newDeployment(ns, "short", 3, map[string]string{scaling.AnnotationDowntime: "always", scaling.AnnotationGracePeriod: "60"})
		long := newDeployment(ns, "long", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		runOperator(scaling.Options{Clock: clock, GracePeriod: time.Hour})

		Eventually(notes(short, scaling.ReasonGracePeriod)).Should(ContainElement(ContainSubstring("created less than 1m0s ago")))
		clock.JumpTo(now.Add(2 * time.Minute))
		Eventually(replicas(short)).Should(BeEquivalentTo(0))
		Consistently(replicas(long)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))
	})

	It("writes nothing for a workload or namespace in dry-run, of any kind, and says what it would do", func() {
		ns := newNamespace(map[string]string{scaling.AnnotationDryRun: "true", scaling.AnnotationDowntime: "always"})
		web := newDeployment(ns, "web", 3, nil)
		// A CronJob takes no schedule from its namespace (it is not among the default
		// scaling kinds), but the namespace's dry-run reaches it.
		cron := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly", Annotations: map[string]string{scaling.AnnotationDowntime: "always"}},
			Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: podTemplate("nightly").Spec.Containers}},
			}}},
		}
		Expect(k8s.Create(ctx, cron)).To(Succeed())
		other := newNamespace(nil)
		real := newDeployment(other, "real", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		dry := newDeployment(other, "dry", 3, map[string]string{scaling.AnnotationDowntime: "always", scaling.AnnotationDryRun: "true"})
		runOperator(scaling.Options{Clock: clock})

		Eventually(replicas(real)).Should(BeEquivalentTo(0))
		for _, o := range []client.Object{web, cron, dry} {
			Eventually(notes(o, scaling.ReasonScaleDown)).Should(ContainElement(ContainSubstring("dry run, nothing written")))
			Expect(annotation(o, scaling.AnnotationOriginalReplicas)(Default)).To(BeEmpty())
		}
		Consistently(replicas(web)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))
		Expect(replicas(dry)(Default)).To(BeEquivalentTo(3))
		live := &batchv1.CronJob{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cron), live)).To(Succeed())
		Expect(live.Spec.Suspend).To(HaveValue(BeFalse()))
	})

	It("accepts a schedule the peers accept with their meaning, and warns how it read it", func() {
		ns := newNamespace(nil)
		empty := newDeployment(ns, "empty", 3, map[string]string{scaling.AnnotationDowntime: "Mon-Fri 19:00-19:00 Europe/Berlin"})
		late := newDeployment(ns, "late", 3, map[string]string{scaling.AnnotationDowntime: "Mon-Fri 24:00-08:00 Europe/Berlin"})
		runOperator(scaling.Options{Clock: clock})

		Eventually(notes(empty, scaling.ReasonScheduleReadAsPeers)).Should(ContainElement(Satisfy(containsAll(
			"Warning: ", scaling.AnnotationDowntime, `element 1 "Mon-Fri 19:00-19:00 Europe/Berlin"`, "never matches"))))
		Eventually(notes(late, scaling.ReasonScheduleReadAsPeers)).Should(ContainElement(ContainSubstring("is 00:00-08:00 on the listed days")))
		clock.JumpTo(berlinDay(friday, 0, 19, 0))
		Consistently(replicas(empty)).WithTimeout(2 * time.Second).Should(BeEquivalentTo(3))
		clock.JumpTo(berlinDay(friday, 3, 0, 30))
		Eventually(replicas(late)).Should(BeEquivalentTo(0), "Monday 00:30 is in 24:00-08:00 as GoKubeDownscaler reads it")
	})

	It("keeps controller-runtime's priority queue: the clock is injected through the wake-ups", func() {
		ns := newNamespace(nil)
		web := newDeployment(ns, "web", 3, map[string]string{scaling.AnnotationDowntime: "always"})
		runOperator(scaling.Options{Clock: clock})
		Eventually(replicas(web)).Should(BeEquivalentTo(0))

		families, err := metrics.Registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		var priorities []string
		for _, f := range families {
			if f.GetName() != "workqueue_depth" {
				continue
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["name"] == "scaling-deployment" {
					priorities = append(priorities, labels["priority"])
				}
			}
		}
		Expect(priorities).NotTo(BeEmpty())
		Expect(priorities).NotTo(ContainElement(""), "a plain workqueue reports its depth without a priority")
	})

	It("suspends a CronJob and moves a DaemonSet off its nodes, restoring both exactly", func() {
		ns := newNamespace(nil)
		cron := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly", Annotations: map[string]string{scaling.AnnotationUptime: workingHours}},
			Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: podTemplate("nightly").Spec.Containers}},
			}}},
		}
		Expect(k8s.Create(ctx, cron)).To(Succeed())
		template := podTemplate("agent")
		template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent", Annotations: map[string]string{scaling.AnnotationUptime: workingHours}},
			Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}, Template: template},
		}
		Expect(k8s.Create(ctx, ds)).To(Succeed())
		runOperator(scaling.Options{Clock: clock})

		clock.JumpTo(berlinDay(friday, 0, 18, 0))
		monday := utc(berlinDay(friday, 3, 8, 0))
		Eventually(func(g Gomega) *batchv1.CronJob {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cron), cron)).To(Succeed())
			return cron
		}).Should(And(HaveField("Spec.Suspend", HaveValue(BeTrue())), HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, monday))))
		Eventually(func(g Gomega) *appsv1.DaemonSet {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ds), ds)).To(Succeed())
			return ds
		}).Should(And(
			HaveField("Spec.Template.Spec.NodeSelector", Equal(map[string]string{"disk": "ssd", scaling.NodeSelectorScaledDown: "true"})),
			HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalNodeSelector, `{"disk":"ssd"}`)),
			HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, monday))))

		clock.JumpTo(berlinDay(friday, 3, 8, 0))
		Eventually(func(g Gomega) *batchv1.CronJob {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cron), cron)).To(Succeed())
			return cron
		}).Should(And(HaveField("Spec.Suspend", HaveValue(BeFalse())), HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalReplicas)))))
		Eventually(func(g Gomega) *appsv1.DaemonSet {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(ds), ds)).To(Succeed())
			return ds
		}).Should(And(
			HaveField("Spec.Template.Spec.NodeSelector", Equal(map[string]string{"disk": "ssd"})),
			HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalNodeSelector)))))
	})
})
