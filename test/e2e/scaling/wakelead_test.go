package scaling_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// TestAWakeLeadRestoresBeforeTheUptimeBegins runs three Deployments through a downtime
// that ends in about 50 seconds: one whose Namespace sets a wake lead of 20 s, one with
// none beside it, and one whose downtime already ends within its lead when the operator
// first sees it. The first is scaled down, records the lead's instant as its next
// transition, and is back before the downtime ends while the second is still down; the
// third is never scaled down.
func TestAWakeLeadRestoresBeforeTheUptimeBegins(t *testing.T) {
	g := expect(t)
	const lead = 20 * time.Second
	end := time.Now().Add(50 * time.Second).UTC().Truncate(time.Second)
	downtime := time.Now().Add(-time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339) + "-" + end.Format(time.RFC3339)
	early := newNamespace(t, map[string]string{scaling.AnnotationWakeLead: "20s"})
	late := newNamespace(t, nil)
	// The Namespace's lead applies to the workload's own schedule.
	web := newDeployment(t, early, "web", 3, map[string]string{scaling.AnnotationDowntime: downtime})
	other := newDeployment(t, late, "web", 2, map[string]string{scaling.AnnotationDowntime: downtime})
	short := newDeployment(t, early, "short", 4, map[string]string{
		scaling.AnnotationDowntime: time.Now().Add(-time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339) + "-" +
			time.Now().Add(10*time.Second).UTC().Truncate(time.Second).Format(time.RFC3339),
	})
	startOperator(t, scaling.Options{})

	replicas := func(d *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(d)(g).Spec.Replicas, -1) }
	}
	g.Eventually(func(g Gomega) string {
		d := live(web)(g)
		g.Expect(ptr.Deref(d.Spec.Replicas, -1)).To(BeEquivalentTo(0))
		return d.Annotations[scaling.AnnotationNextTransition]
	}).WithTimeout(timeout).WithPolling(interval).Should(Equal(end.Add(-lead).Format(time.RFC3339)),
		"scaled down, to be woken the lead before the downtime ends")
	g.Eventually(replicas(other)).WithTimeout(timeout).WithPolling(interval).Should(BeEquivalentTo(0))
	g.Expect(time.Now()).To(BeTemporally("<", end.Add(-lead)), "the machine was too slow to see the downtime before its lead")

	g.Eventually(replicas(web)).WithTimeout(time.Until(end)).WithPolling(interval).Should(BeEquivalentTo(3),
		"restored before the downtime ends")
	woken := time.Now()
	g.Expect(woken).To(BeTemporally(">=", end.Add(-lead)), "restored before the lead began")
	g.Expect(replicas(other)(g)).To(BeEquivalentTo(0), "the Deployment without a lead is still down")
	g.Expect(notes(web, scaling.ReasonScaleUp)(g)).To(ContainElement(ContainSubstring("wake lead 20s before the uptime at " + end.Format(time.RFC3339))))

	g.Eventually(replicas(other)).WithTimeout(timeout).WithPolling(interval).Should(BeEquivalentTo(2), "the other comes back when the downtime ends")
	g.Expect(time.Now()).To(BeTemporally(">=", end))
	// The short downtime ended within the lead before the operator first decided it.
	g.Expect(replicas(short)(g)).To(BeEquivalentTo(4))
	g.Expect(live(short)(g).Annotations).NotTo(HaveKey(scaling.AnnotationOriginalReplicas))
	g.Expect(notes(short, scaling.ReasonScaleDown)(g)).To(BeEmpty())
}
