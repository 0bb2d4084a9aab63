package scaling_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// downtimeEndingIn is a downtime that began a minute ago and ends in d, whole seconds.
func downtimeEndingIn(d time.Duration) (string, time.Time) {
	end := time.Now().Add(d).UTC().Truncate(time.Second)
	return time.Now().Add(-time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339) + "-" + end.Format(time.RFC3339), end
}

// available reports whether a Deployment or StatefulSet is Ready as wake-after means
// it: its controller has seen its spec, and all the replicas it asks for are available.
func available(replicas *int32, generation, observed int64, availableReplicas int32) bool {
	want := ptr.Deref(replicas, 1)
	return want > 0 && observed >= generation && availableReplicas >= want
}

// TestAMorningOfTwoHundredWorkloadsComesUpInOrder runs 200 workloads through a downtime
// that ends at once for all of them, under --scaling-restore-rate=20: a StatefulSet db;
// nine services that wake after it; a chain of four queues, each after the one before
// (the first after db); and 186 web front ends, each after one of the services. The
// pods run (kwok), so Ready is the Deployment and StatefulSet controllers' own. It
// checks, on snapshots taken while they come up, that no workload is restored before
// what it waits for is Ready; on the operator's ScaleUp events, that no two restores
// are closer than the rate allows; and at the end, that every one is back.
func TestAMorningOfTwoHundredWorkloadsComesUpInOrder(t *testing.T) {
	g := expect(t)
	ctx := context.Background()
	const rate = 20.0
	downtime, end := downtimeEndingIn(30 * time.Second)
	ns := newNamespace(t, map[string]string{scaling.AnnotationDowntime: downtime})

	after := map[string]string{} // workload -> what it waits for, "kind/name"
	db := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, Template: podTemplate("db")},
	}
	g.Expect(admin.Create(ctx, db)).To(Succeed())
	var names []string
	add := func(name, wakeAfter string) {
		after[name] = wakeAfter
		names = append(names, name)
		newDeployment(t, ns, name, 1, map[string]string{scaling.AnnotationWakeAfter: wakeAfter, scaling.AnnotationWakeAfterTimeout: "5m"})
	}
	for i := range 9 {
		add(fmt.Sprintf("svc-%d", i), "statefulset/db")
	}
	add("queue-1", "sts/db")
	for i := 2; i <= 4; i++ {
		add(fmt.Sprintf("queue-%d", i), fmt.Sprintf("deployment/queue-%d", i-1))
	}
	for i := range 186 {
		add(fmt.Sprintf("web-%03d", i), fmt.Sprintf("deploy/svc-%d", i%9))
	}
	g.Expect(len(names) + 1).To(Equal(200))
	startOperator(t, scaling.Options{RestoreRate: rate, Concurrency: 8})

	deploymentsIn := func(g Gomega) map[string]appsv1.Deployment {
		list := &appsv1.DeploymentList{}
		g.Expect(admin.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		out := map[string]appsv1.Deployment{}
		for _, d := range list.Items {
			out[d.Name] = d
		}
		return out
	}
	g.Eventually(func(g Gomega) int {
		down := 0
		for _, d := range deploymentsIn(g) {
			if ptr.Deref(d.Spec.Replicas, -1) == 0 {
				down++
			}
		}
		if ptr.Deref(live(db)(g).Spec.Replicas, -1) == 0 {
			down++
		}
		return down
	}).WithTimeout(time.Until(end)).WithPolling(time.Second).Should(Equal(200), "the machine was too slow to scale them down before the downtime ended")
	t.Logf("all 200 down %s before the downtime ended", time.Until(end).Round(time.Second))

	// Deployments first, then the StatefulSet: a Deployment restored in the first list
	// was restored after db was Ready, and db stays Ready, so the second list shows it so.
	// Deployments among themselves are one consistent list.
	restored := map[string]bool{}
	var early []string // restored before what they wait for was Ready
	readyAt, restoredAt := map[string]time.Time{}, map[string]time.Time{}
	g.Eventually(func(g Gomega) int {
		deps := deploymentsIn(g)
		s := live(db)(g)
		dbReady := available(s.Spec.Replicas, s.Generation, s.Status.ObservedGeneration, s.Status.AvailableReplicas)
		now := time.Now()
		for name, d := range deps {
			if ptr.Deref(d.Spec.Replicas, -1) != 1 {
				continue
			}
			if _, seen := readyAt[name]; !seen && available(d.Spec.Replicas, d.Generation, d.Status.ObservedGeneration, d.Status.AvailableReplicas) {
				readyAt[name] = now
			}
			if !restored[name] {
				restoredAt[name] = now
			}
			restored[name] = true
			var ready bool
			switch kind, dep, _ := strings.Cut(after[name], "/"); kind {
			case "statefulset", "sts":
				ready = dbReady
			default:
				o := deps[dep]
				ready = available(o.Spec.Replicas, o.Generation, o.Status.ObservedGeneration, o.Status.AvailableReplicas)
			}
			if !ready && !slices.Contains(early, name) {
				early = append(early, name)
			}
		}
		if dbReady {
			restored["db"] = true
		}
		return len(restored)
	}).WithTimeout(time.Until(end) + 2*timeout).WithPolling(100 * time.Millisecond).Should(Equal(200))
	g.Expect(early).To(BeEmpty(), "restored before what they wake after was Ready")
	// The chain's links are restored as soon as what they wait for is Ready: the change
	// wakes them, not the look every 30 s. queue-2 and queue-3 are what another waits for,
	// so they go first under the rate; queue-4 takes its turn behind the front ends that
	// fell due before it, at most the whole queue at the rate.
	for i, within := range map[int]time.Duration{2: 5 * time.Second, 3: 5 * time.Second, 4: 200/rate*time.Second + 2*time.Second} {
		name, dep := fmt.Sprintf("queue-%d", i), fmt.Sprintf("queue-%d", i-1)
		g.Expect(restoredAt[name].Sub(readyAt[dep])).To(BeNumerically("<", within), "%s restored %s after %s was seen Ready", name, restoredAt[name].Sub(readyAt[dep]), dep)
	}
	for _, name := range []string{"queue-1", "queue-2", "queue-3", "queue-4", "svc-0", "web-000", "web-185"} {
		t.Logf("%s restored %s, Ready %s after the downtime ended", name, restoredAt[name].Sub(end).Round(100*time.Millisecond), readyAt[name].Sub(end).Round(100*time.Millisecond))
	}

	// The operator's ScaleUp events, each stamped when its restore was written: the k-th
	// after any one comes no sooner than k intervals after it, less what the writes'
	// latencies differ by.
	var stamps []time.Time
	g.Eventually(func(g Gomega) int {
		list := &eventsv1.EventList{}
		g.Expect(admin.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		stamps = stamps[:0]
		for _, e := range list.Items {
			if e.Reason == scaling.ReasonScaleUp && e.ReportingController == scaling.FieldManager {
				stamps = append(stamps, e.EventTime.Time)
			}
		}
		return len(stamps)
	}).WithTimeout(timeout).Should(Equal(200))
	slices.SortFunc(stamps, func(a, b time.Time) int { return a.Compare(b) })
	const slack = 500 * time.Millisecond
	for i := range stamps {
		for j := i + 1; j < len(stamps); j++ {
			least := time.Duration(float64(j-i)/rate*float64(time.Second)) - slack
			g.Expect(stamps[j].Sub(stamps[i])).To(BeNumerically(">=", least),
				"restores %d and %d were written %s apart, at %.0f per second", i, j, stamps[j].Sub(stamps[i]), rate)
		}
	}
	g.Expect(stamps[0]).To(BeTemporally(">=", end), "a restore before the downtime ended")
	t.Logf("200 restores from %s to %s after the downtime ended", stamps[0].Sub(end).Round(time.Millisecond), stamps[199].Sub(end).Round(time.Millisecond))
}

// TestARestoreNeverWaitsForeverForWhatItWakesAfter: a restore whose dependency never
// becomes Ready (its pods cannot be scheduled) goes ahead when its timeout runs out,
// with a Warning that says what was not Ready; one that names a workload that does not
// exist goes at once, with a Warning; two that wait for each other both come back at
// their timeouts; and a wake-after that tries to name another namespace's workload is a
// schedule error, which restores at once like any unreadable schedule.
func TestARestoreNeverWaitsForeverForWhatItWakesAfter(t *testing.T) {
	g := expect(t)
	downtime, end := downtimeEndingIn(20 * time.Second)
	ns := newNamespace(t, map[string]string{scaling.AnnotationDowntime: downtime})
	stuck := newDeploymentWith(t, ns, "db", 1, nil, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.NodeSelector = map[string]string{"phalanks.io/no-such-node": "true"}
	})
	const wait = 8 * time.Second
	web := newDeployment(t, ns, "web", 2, map[string]string{scaling.AnnotationWakeAfter: "deployment/db", scaling.AnnotationWakeAfterTimeout: "8s"})
	api := newDeployment(t, ns, "api", 2, map[string]string{scaling.AnnotationWakeAfter: "deployment/no-such-thing"})
	a := newDeployment(t, ns, "a", 1, map[string]string{scaling.AnnotationWakeAfter: "deployment/b", scaling.AnnotationWakeAfterTimeout: "8s"})
	b := newDeployment(t, ns, "b", 1, map[string]string{scaling.AnnotationWakeAfter: "deployment/a", scaling.AnnotationWakeAfterTimeout: "8s"})
	elsewhere := newDeployment(t, ns, "elsewhere", 1, map[string]string{scaling.AnnotationWakeAfter: "kube-system/deployment/coredns"})
	all := []*appsv1.Deployment{stuck, web, api, a, b, elsewhere}
	startOperator(t, scaling.Options{})

	replicas := func(d *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(d)(g).Spec.Replicas, -1) }
	}
	for _, d := range all[:5] {
		g.Eventually(replicas(d)).WithTimeout(time.Until(end)).WithPolling(interval).Should(BeEquivalentTo(0), d.Name)
	}
	g.Consistently(replicas(elsewhere)).WithTimeout(time.Second).Should(BeEquivalentTo(1), "scaled down on a schedule it cannot read")
	g.Expect(notes(elsewhere, scaling.ReasonInvalidSchedule)(g)).To(ContainElement(ContainSubstring(`is not <kind>/<name> of a workload in the same namespace`)))

	restoredAt := map[string]time.Time{}
	g.Eventually(func(g Gomega) int {
		for _, d := range all[:5] {
			if _, seen := restoredAt[d.Name]; !seen && replicas(d)(g) > 0 {
				restoredAt[d.Name] = time.Now()
			}
		}
		return len(restoredAt)
	}).WithTimeout(time.Until(end) + timeout).WithPolling(100 * time.Millisecond).Should(Equal(5))

	g.Expect(restoredAt["api"].Sub(end)).To(BeNumerically("<", wait), "a restore waited for a workload that does not exist")
	g.Expect(notes(api, scaling.ReasonDependencyMissing)(g)).To(ConsistOf(
		"Warning: restored without waiting for Deployment/no-such-thing (it does not exist)"))
	for _, d := range []*appsv1.Deployment{web, a, b} {
		g.Expect(restoredAt[d.Name].Sub(end)).To(BeNumerically(">=", wait-time.Second), "%s did not wait", d.Name)
		g.Eventually(notes(d, scaling.ReasonDependencyTimeout)).Should(ConsistOf(HavePrefix("Warning: restored after waiting ")), d.Name)
		g.Expect(notes(d, scaling.ReasonWaitingForDependency)(g)).To(ConsistOf(HavePrefix("Normal: restore waits until the workload wake-after names is Ready (at most 8s")), d.Name)
	}
	g.Expect(notes(web, scaling.ReasonDependencyTimeout)(g)).To(ConsistOf(HaveSuffix("Deployment/db: 0 of 1 replicas available")))
	g.Expect(replicas(web)(g)).To(BeEquivalentTo(2), "the count saved at the scale-down is restored")

	// The pods of what waited are there: nothing is left down.
	pods := &corev1.PodList{}
	g.Eventually(func(g Gomega) int {
		g.Expect(admin.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app": "web"})).To(Succeed())
		return len(pods.Items)
	}).WithTimeout(timeout).Should(Equal(2))
}
