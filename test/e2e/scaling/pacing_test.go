package scaling_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/phalanks/phalanks-operator/controllers/scaling"
)

// restoreLagCount is how many restores the process's operators have timed so far
// (phalanks_scaling_restore_lag_seconds of Deployments).
func restoreLagCount(g Gomega) uint64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "phalanks_scaling_restore_lag_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "kind" && l.GetValue() == "Deployment" }) {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// TestRestoresArePacedAtTheRestoreRate runs twelve Deployments through a downtime that
// ends at once for all of them, under --scaling-restore-rate=2: they come back one at a
// time, at least 500 ms apart on the operator's side (so the last at least 5.5 s after
// the first, less what observing them adds), all of them, each timed by the restore-lag
// histogram. Without a rate the twelve come back within about a second.
func TestRestoresArePacedAtTheRestoreRate(t *testing.T) {
	g := expect(t)
	const n, rate = 12, 2.0
	end := time.Now().Add(20 * time.Second).UTC().Truncate(time.Second)
	downtime := time.Now().Add(-time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339) + "-" + end.Format(time.RFC3339)
	ns := newNamespace(t, map[string]string{scaling.AnnotationDowntime: downtime})
	var deployments []*appsv1.Deployment
	for i := range n {
		deployments = append(deployments, newDeployment(t, ns, fmt.Sprintf("web-%02d", i), 2, nil))
	}
	lagBefore := restoreLagCount(g)
	startOperator(t, scaling.Options{RestoreRate: rate})

	replicas := func(d *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(d)(g).Spec.Replicas, -1) }
	}
	for _, d := range deployments {
		g.Eventually(replicas(d)).WithTimeout(timeout).WithPolling(interval).Should(BeEquivalentTo(0), d.Name)
	}
	g.Expect(time.Now()).To(BeTemporally("<", end), "the machine was too slow to scale them down before the downtime ended")

	// Watch them come back, noting when each is first seen restored.
	restoredAt := map[string]time.Time{}
	g.Eventually(func(g Gomega) int {
		for _, d := range deployments {
			if _, seen := restoredAt[d.Name]; !seen && replicas(d)(g) == 2 {
				restoredAt[d.Name] = time.Now()
			}
		}
		return len(restoredAt)
	}).WithTimeout(time.Until(end) + timeout).WithPolling(50 * time.Millisecond).Should(Equal(n))
	var times []time.Time
	for _, at := range restoredAt {
		times = append(times, at)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	spread := times[n-1].Sub(times[0])
	// The i-th restore is written no earlier than i intervals after the first; the
	// first may be seen up to a second late.
	g.Expect(spread).To(BeNumerically(">=", time.Duration(float64(n-1)/rate*float64(time.Second))-time.Second),
		"twelve restores at 2 per second were spread over %s", spread)
	g.Expect(times[0]).To(BeTemporally(">=", end), "a restore before the downtime ended")
	g.Eventually(restoreLagCount).Should(BeNumerically(">=", lagBefore+n), "each restore is timed")
}

// TestRestoresGoInOrderOfPriority runs six Deployments through a downtime that ends at
// once for all of them, under --scaling-restore-rate=2: the two with restore-priority 100
// (a database's and a cache's, say) come back first, then the one with 50, then the
// rest, whatever order their reconciles came in.
func TestRestoresGoInOrderOfPriority(t *testing.T) {
	g := expect(t)
	end := time.Now().Add(15 * time.Second).UTC().Truncate(time.Second)
	downtime := time.Now().Add(-time.Minute).UTC().Truncate(time.Second).Format(time.RFC3339) + "-" + end.Format(time.RFC3339)
	ns := newNamespace(t, map[string]string{scaling.AnnotationDowntime: downtime})
	priorities := map[string]string{"a-web": "", "b-web": "", "c-web": "", "x-db": "100", "y-cache": "100", "z-queue": "50"}
	var deployments []*appsv1.Deployment
	for name, p := range priorities {
		var annotations map[string]string
		if p != "" {
			annotations = map[string]string{scaling.AnnotationRestorePriority: p}
		}
		deployments = append(deployments, newDeployment(t, ns, name, 2, annotations))
	}
	startOperator(t, scaling.Options{RestoreRate: 2})

	replicas := func(d *appsv1.Deployment) func(Gomega) int32 {
		return func(g Gomega) int32 { return ptr.Deref(live(d)(g).Spec.Replicas, -1) }
	}
	for _, d := range deployments {
		g.Eventually(replicas(d)).WithTimeout(timeout).WithPolling(interval).Should(BeEquivalentTo(0), d.Name)
	}
	g.Expect(time.Now()).To(BeTemporally("<", end), "the machine was too slow to scale them down before the downtime ended")

	var order []string
	g.Eventually(func(g Gomega) int {
		for _, d := range deployments {
			if !slices.Contains(order, d.Name) && replicas(d)(g) == 2 {
				order = append(order, d.Name)
			}
		}
		return len(order)
	}).WithTimeout(time.Until(end) + timeout).WithPolling(50 * time.Millisecond).Should(Equal(len(deployments)))
	g.Expect(order[:2]).To(ConsistOf("x-db", "y-cache"), "restored in the order %v", order)
	g.Expect(order[2]).To(Equal("z-queue"), "restored in the order %v", order)
}
