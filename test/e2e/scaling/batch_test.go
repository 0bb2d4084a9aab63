package scaling_test

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

func newCronJob(t *testing.T, ns, name string, suspend bool, annotations map[string]string) *batchv1.CronJob {
	t.Helper()
	c := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *",
			Suspend:  ptr.To(suspend),
			// One Job at a time: kwok's pods never finish.
			ConcurrencyPolicy: batchv1.ReplaceConcurrent,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: podTemplate(name).Spec.Containers},
			}}},
		},
	}
	expect(t).Expect(admin.Create(context.Background(), c)).To(Succeed())
	return c
}

// jobsOf returns the names of the Jobs a CronJob has created.
func jobsOf(cj *batchv1.CronJob) func(Gomega) []string {
	return func(g Gomega) []string {
		list := &batchv1.JobList{}
		g.Expect(admin.List(context.Background(), list, client.InNamespace(cj.Namespace))).To(Succeed())
		var out []string
		for _, j := range list.Items {
			if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == cj.UID {
				out = append(out, j.Name)
			}
		}
		return out
	}
}

// TestASuspendedCronJobCreatesNoJobs gives a namespace a downtime, which reaches its
// CronJobs once --default-scaling-kinds names them, and checks with
// kube-controller-manager's CronJob controller that its CronJob, which runs every
// minute, is suspended and creates no Job through a minute boundary, then that Jobs
// come again after the restore. A CronJob the user had suspended stays suspended, and
// the Jobs a CronJob created are left to it without a word.
func TestASuspendedCronJobCreatesNoJobs(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{DefaultKinds: append(slices.Clone(scaling.DefaultScalingKinds), "cronjobs.batch")})
	spec, next := downtimeForAnHour()
	every := newCronJob(t, ns, "every-minute", false, nil)
	paused := newCronJob(t, ns, "paused-by-user", true, nil)

	// The CronJob controller runs it: a first Job within a minute or so.
	g.Eventually(jobsOf(every)).WithTimeout(timeout).WithPolling(time.Second).ShouldNot(BeEmpty())

	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	annotate(g, namespace, map[string]string{scaling.AnnotationDowntime: spec})
	g.Eventually(func(g Gomega) *batchv1.CronJob { return live(every)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.Suspend", HaveValue(BeTrue())),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationOriginalReplicas, "1")),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, next)),
	))
	g.Eventually(notes(every, scaling.ReasonScaleDown)).WithTimeout(timeout).Should(ContainElement(ContainSubstring("suspended (spec.suspend: true) for the downtime until " + next)))

	before := jobsOf(every)(g)
	// A whole minute boundary and the controller's resync go by without a new Job.
	g.Consistently(jobsOf(every)).WithTimeout(75*time.Second).WithPolling(time.Second).Should(ConsistOf(before),
		"a suspended CronJob must create no Jobs")
	for _, j := range before {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: j}}
		g.Expect(writtenBy(scaling.FieldManager)(live(job)(g))).To(BeFalse(), "a CronJob's Jobs are its own")
		g.Expect(notes(job, scaling.ReasonControlledByOwner)(g)).To(BeEmpty())
	}
	pausedNow := live(paused)(g)
	g.Expect(pausedNow.Spec.Suspend).To(HaveValue(BeTrue()))
	g.Expect(pausedNow.Annotations).NotTo(HaveKey(scaling.AnnotationOriginalReplicas), "nothing to restore: it was suspended already")

	annotate(g, namespace, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(func(g Gomega) *batchv1.CronJob { return live(every)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.Suspend", HaveValue(BeFalse())),
		HaveField("Annotations", Not(HaveKey(scaling.AnnotationOriginalReplicas))),
	))
	g.Eventually(jobsOf(every)).WithTimeout(timeout).WithPolling(time.Second).Should(Not(ConsistOf(before)), "Jobs come again")
	g.Consistently(func(g Gomega) *bool { return live(paused)(g).Spec.Suspend }).WithTimeout(3*time.Second).
		Should(HaveValue(BeTrue()), "the user's suspension outlives the downtime")
}

// TestASuspendedJobStopsItsPodsAndResumes suspends a running Job for a downtime: the
// Job controller removes its pods and reports it Suspended, and after the restore it
// runs its pods again.
func TestASuspendedJobStopsItsPodsAndResumes(t *testing.T) {
	g := expect(t)
	ns := newNamespace(t, nil)
	startOperator(t, scaling.Options{})
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "batch"},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To[int32](2), Completions: ptr.To[int32](4),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: podTemplate("batch").Spec.Containers}},
		},
	}
	g.Expect(admin.Create(context.Background(), job)).To(Succeed())
	active := func(g Gomega) int32 { return live(job)(g).Status.Active }
	g.Eventually(active).WithTimeout(timeout).Should(BeEquivalentTo(2))

	spec, next := downtimeForAnHour()
	annotate(g, job, map[string]string{scaling.AnnotationDowntime: spec})
	g.Eventually(func(g Gomega) *batchv1.Job { return live(job)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.Suspend", HaveValue(BeTrue())),
		HaveField("Annotations", HaveKeyWithValue(scaling.AnnotationNextTransition, next)),
		HaveField("Status.Active", BeEquivalentTo(0)),
		HaveField("Status.Conditions", ContainElement(And(
			HaveField("Type", batchv1.JobSuspended), HaveField("Status", corev1.ConditionTrue)))),
	))

	annotate(g, job, map[string]string{scaling.AnnotationDowntime: ""})
	g.Eventually(func(g Gomega) *batchv1.Job { return live(job)(g) }).WithTimeout(timeout).Should(And(
		HaveField("Spec.Suspend", HaveValue(BeFalse())),
		HaveField("Status.Active", BeEquivalentTo(2)),
	))
}
